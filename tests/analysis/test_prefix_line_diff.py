"""The prefix line diff selector and its one partial (templates/manifests/_prefix_line_diff.html)."""

from __future__ import annotations

from django.template import Context, Template

from ctxkit.context.prefix_lines import line_hashes
from manifests.selectors.prefix_lines import MAX_ROWS, line_diff


def seg(name: str, text: str, *, with_text: bool = True, lines: bool = True) -> dict:
    out = {"name": name, "hash": str(hash(text)), "tokens": 10}
    if lines:
        out["lines"] = line_hashes(text)
    if with_text:
        out["text"] = text
    return out


def render(before: list[dict], after: list[dict]) -> str:
    return Template("{% load prefix_lines %}{% prefix_line_diff a b %}").render(Context({"a": before, "b": after}))


def test_it_names_the_changed_line_with_its_text():
    diff = line_diff([seg("system", "Rules\nCurrent time: 12:47\nBe brief")],
                     [seg("system", "Rules\nCurrent time: 12:48\nBe brief"), seg("tools", "t")])
    assert [(r.segment, r.line, r.change, r.before, r.after) for r in diff.rows] == [
        ("system", 2, "changed", "Current time: 12:47", "Current time: 12:48")]
    html = render([seg("system", "Rules\nCurrent time: 12:47")], [seg("system", "Rules\nCurrent time: 12:48")])
    assert "line 2 of <b>system</b> changed: <code>Current time: 12:47</code> → <code>Current time: 12:48</code>" \
        in html


def test_it_numbers_lines_only_when_text_is_withheld():
    diff = line_diff([seg("system", "a\nb\nc", with_text=False)], [seg("system", "a\nB\nc", with_text=False)])
    assert [(r.line, r.change, r.before, r.after) for r in diff.rows] == [(2, "changed", None, None)]
    assert diff.text_withheld
    html = render([seg("system", "a\nb\nc", with_text=False)], [seg("system", "a\nB\nc", with_text=False)])
    assert "line 2 of <b>system</b> changed</li>" in html and "withholds prefix text" in html


def test_it_tells_added_and_removed_lines_and_counts_the_rest():
    diff = line_diff([seg("tools", "a\nb\nc")], [seg("tools", "a\nc\nd")])
    assert [(r.line, r.change) for r in diff.rows] == [(2, "removed"), (3, "added")]
    many = line_diff([seg("s", "\n".join(map(str, range(40))))], [seg("s", "\n".join(f"x{n}" for n in range(40)))])
    assert len(many.rows) == MAX_ROWS and many.more == 40 - MAX_ROWS


def test_it_says_when_a_changed_segment_has_no_line_hashes_and_is_silent_when_nothing_changed():
    old = line_diff([seg("system", "a", lines=False)], [seg("system", "b", lines=False)])
    assert old.unlined == ["system"] and not old.rows
    assert line_diff([seg("system", "a")], [seg("system", "a")]).empty
    assert line_diff(None, [seg("system", "a")]).empty
    assert render([seg("system", "a")], [seg("system", "a")]).strip() == ""


def test_hostile_line_text_is_escaped():
    html = render([seg("system", "ok")], [seg("system", "<script>alert(1)</script>")])
    assert "<script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
