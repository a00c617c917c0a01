"""What ctxkit builds is a manifest the server accepts, by construction.

``build_manifest`` runs the server's check (``convert_manifest``) on the agent's thread only when
the caller hands in a manifest struct made by hand (msgspec checks nothing at construction). This
file is the proof the default relies on: over generated candidates (odd ids, control characters,
long texts, every policy), budgets, blocks, key fields and provider usage, the manifest of
``ContextBuilder`` and of ``allocate`` + ``build_manifest`` passes the server's own check.
"""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxkit.context.allocator import Segment, allocate
from ctxkit.context.layout import Block
from ctxkit.context.readback import KeyField
from ctxkit.manifest import Builder, Compaction, ContextEdit, Evidence, Item, Outcome, Prefix, convert_manifest
from ctxkit.record.assemble import build_manifest, hand_made_parts
from ctxkit.record.builder import ContextBuilder

POLICIES = ["pin", "extract", "summarize", "truncate", "ref", "window", "schema", "drop"]
KINDS = ["system", "task", "constraint", "memory", "history", "tool_result", "retrieval", "tools", "other"]
WORDS = ["退款率", "不得", "429", "error", "rate", "limit", "ok", "\x00", "\x1f", "\u2028", '{"a": 1}', "  ", "…"]

line = st.lists(st.sampled_from(WORDS), min_size=1, max_size=10).map(" ".join)
text = st.lists(line, min_size=0, max_size=10).map("\n".join)
name = st.one_of(st.text(min_size=1, max_size=12), st.text(min_size=195, max_size=260))
# A workspace as agents report it: a path, a branch, "HEAD", control characters, too long.
place = st.one_of(st.just(""), st.just("HEAD"), st.text(max_size=40), st.text(min_size=490, max_size=600),
                  st.lists(st.sampled_from(["/home", "dev", "ctxview", "\n", "\x1f", "<b>", "é"]), max_size=8)
                  .map("/".join))


@st.composite
def segments(draw: st.DrawFn) -> list[Segment]:
    out = []
    for i, n in enumerate(draw(st.lists(name, max_size=8, unique=True))):
        out.append(
            Segment(
                name=n,
                kind=draw(st.sampled_from(KINDS)),
                text=draw(text),
                policy=draw(st.sampled_from(POLICIES)),
                priority=draw(st.integers(0, 1000)),
                min_tokens=draw(st.integers(0, 50)),
                keep_recent=draw(st.integers(0, 3)),
                source_ref=draw(st.one_of(st.none(), st.text(max_size=1100))),
                trust=draw(st.sampled_from(["trusted", "untrusted"])),
                why=draw(line),
                near_dupes=i % 2 == 0,
            )
        )
    return out


usage = st.one_of(
    st.none(),
    st.fixed_dictionaries(
        {
            "input_tokens": st.integers(0, 10**6),
            "output_tokens": st.integers(0, 10**5),
            "cache_read_input_tokens": st.integers(0, 10**6),
            "cache_creation_input_tokens": st.integers(0, 10**5),
        }
    ),
)


def assert_server_accepts(manifest: object) -> None:
    _, errors = convert_manifest(msgspec.to_builtins(manifest))
    assert errors == []


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    segments(),
    st.lists(line, max_size=3),
    st.integers(1, 3000),
    st.integers(0, 3000),
    usage,
    st.lists(st.tuples(line, st.sampled_from(["429", "退款率", "rate limit", "\x1f429"])), max_size=3),
    place,
    place,
)
def test_it_builds_manifests_the_server_accepts_without_the_check(
    segs, constraints, budget, reserve, raw_usage, fields, cwd, branch
) -> None:
    blocks = [Block(id=f"c{i}", kind="constraint", text=c) for i, c in enumerate(constraints)]
    blocks.append(Block(id="question", kind="user", text="why 429?"))
    key_fields = [KeyField(label=label, literal=literal, key=f"k{i}") for i, (label, literal) in enumerate(fields)]
    builder = ContextBuilder(budget=budget, reserve=min(reserve, budget), key_fields=key_fields)
    built = builder.build(segs, blocks=blocks)
    kwargs = {
        "call_id": "c",
        "run_id": "r",
        "step": 1,
        "model": "m" * 300,
        "usage": raw_usage,
        "provider": "anthropic" if raw_usage else "",
        "warnings": ["w\x00" * 1500] * 120,
        "cwd": cwd,
        "git_branch": branch,
    }
    assert_server_accepts(built.manifest(**kwargs))
    plan = allocate(segs, budget=budget, reserve=min(reserve, budget))
    assert_server_accepts(build_manifest(plan=plan, **kwargs))


def test_it_checks_a_manifest_with_a_hand_made_part() -> None:
    plan = allocate([Segment(name="a", kind="task", text="hello")], budget=100)
    ident = {"call_id": "c", "run_id": "r", "step": 0, "model": "m", "plan": plan}
    build_manifest(**ident)  # nothing hand-made: valid by construction, no check needed
    bad_prefix = Prefix(hash="")  # msgspec does not check at construction; the server would refuse it
    with pytest.raises(ValueError, match=r"\$\.prefix\.hash"):
        build_manifest(**ident, prefix=bad_prefix)
    with pytest.raises(ValueError, match=r"\$\.prefix\.hash"):
        build_manifest(**ident, prefix=bad_prefix, validate=True)
    build_manifest(**ident, prefix=bad_prefix, validate=False)  # the caller's explicit choice


@pytest.mark.parametrize("part", ["prefix", "builder", "extra_items", "outcome", "readback", "compactions", "edits"])
def test_it_names_every_hand_made_part(part: str) -> None:
    parts = {
        "prefix": None,
        "builder": None,
        "extra_items": [],
        "outcome": None,
        "readback": [],
        "compactions": [],
        "edits": [],
    }
    assert not hand_made_parts(**parts)
    parts[part] = {
        "prefix": Prefix(hash="h"),
        "builder": Builder(name="b"),
        "extra_items": [Item(id="x", kind="other", action="keep", requested_tokens=1)],
        "outcome": Outcome(),
        "readback": [Evidence(key="k", present=True)],
        "compactions": [Compaction(id="c", strategy="s", tokens_before=1, tokens_after=0)],
        "edits": [ContextEdit(type="clear")],
    }[part]
    assert hand_made_parts(**parts)
