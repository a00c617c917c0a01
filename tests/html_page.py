"""HTML pages read as a tree, for the page tests: the standard library's ``html.parser``
builds it, and a small subset of CSS selectors finds elements in it, so a test names an
element as the template and the stylesheet do, never by the text around it.

Selectors: ``tag``, ``#id``, ``.class``, ``[attr]``, ``[attr=value]`` (quoted or not), any
of them together (``tr.bad[data-call="x"]``), and descendants separated by spaces
(``#steps thead th``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from html.parser import HTMLParser

# Elements that never have an end tag.
VOID = frozenset({"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"})

_SIMPLE = re.compile(r"""(?P<tag>[a-zA-Z][\w-]*|\*)?|\#(?P<id>[\w-]+)|\.(?P<cls>[\w-]+)|"""
                     r"""\[(?P<attr>[\w-]+)(?:=(?:"(?P<dq>[^"]*)"|'(?P<sq>[^']*)'|(?P<bare>[^\]]*)))?\]""")


# The simple selectors of a selector: split at white space outside brackets.
_PARTS = re.compile(r"(?:[^\s\[]|\[[^\]]*\])+")


@dataclass
class Element:
    tag: str
    attrs: dict[str, str]
    children: list[Element | str] = field(default_factory=list)

    def get(self, name: str, default: str | None = None) -> str | None:
        return self.attrs.get(name, default)

    @property
    def classes(self) -> list[str]:
        return (self.attrs.get("class") or "").split()

    @property
    def text(self) -> str:
        """The text inside, entities decoded, runs of white space made one space."""
        return " ".join(self.raw_text.split())

    @property
    def raw_text(self) -> str:
        """The text inside as written, entities decoded, white space kept."""
        return "".join(c if isinstance(c, str) else c.raw_text for c in self.children)

    @property
    def lines(self) -> list[str]:
        """The text inside split at each ``<br>``, each line's white space made one space."""
        found = [""]

        def walk(element: Element) -> None:
            for child in element.children:
                if isinstance(child, str):
                    found[-1] += child
                elif child.tag == "br":
                    found.append("")
                else:
                    walk(child)

        walk(self)
        return [" ".join(line.split()) for line in found]

    def elements(self) -> list[Element]:
        """Every element inside, in document order."""
        found: list[Element] = []
        for child in self.children:
            if isinstance(child, Element):
                found.append(child)
                found += child.elements()
        return found

    def after(self, element: Element) -> list[Element]:
        """The elements inside that come after ``element`` and all it holds, in document order."""
        found = self.elements()
        start = next(n for n, e in enumerate(found) if e is element)
        return found[start + 1 + len(element.elements()):]

    def select(self, selector: str) -> list[Element]:
        """The elements inside that match ``selector``, in document order."""
        steps = [_compile(part) for part in _PARTS.findall(selector)]
        matches = [self]
        for step in steps:
            seen: set[int] = set()
            found = []
            for scope in matches:
                for element in scope.elements():
                    if id(element) not in seen and step(element):
                        seen.add(id(element))
                        found.append(element)
            matches = found
        return matches

    def one(self, selector: str) -> Element:
        """The one element inside that matches ``selector`` (an assertion if none or several)."""
        found = self.select(selector)
        assert len(found) == 1, f"{selector!r}: {len(found)} elements"
        return found[0]


def _compile(simple: str):
    tests = []
    for m in _SIMPLE.finditer(simple):
        if m.group(0) == "":
            continue
        if m.group("tag") and m.group("tag") != "*":
            tests.append(lambda e, tag=m.group("tag").lower(): e.tag == tag)
        elif m.group("id"):
            tests.append(lambda e, v=m.group("id"): e.attrs.get("id") == v)
        elif m.group("cls"):
            tests.append(lambda e, v=m.group("cls"): v in e.classes)
        elif m.group("attr"):
            value = next((v for v in (m.group("dq"), m.group("sq"), m.group("bare")) if v is not None), None)
            tests.append(lambda e, a=m.group("attr"), v=value: a in e.attrs and (v is None or e.attrs[a] == v))
    assert "".join(m.group(0) for m in _SIMPLE.finditer(simple)) == simple, f"unsupported selector {simple!r}"
    return lambda e: all(t(e) for t in tests)


class _Builder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Element("#document", {})
        self.stack = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        element = Element(tag, {k: v if v is not None else "" for k, v in attrs})
        self.stack[-1].children.append(element)
        if tag not in VOID:
            self.stack.append(element)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.stack[-1].children.append(Element(tag, {k: v if v is not None else "" for k, v in attrs}))

    def handle_endtag(self, tag: str) -> None:
        # Close up to the innermost open element of that name (an end tag with none open is ignored).
        for depth in range(len(self.stack) - 1, 0, -1):
            if self.stack[depth].tag == tag:
                del self.stack[depth:]
                return

    def handle_data(self, data: str) -> None:
        self.stack[-1].children.append(data)


def parse(html: str | bytes) -> Element:
    """The document's tree (its root holds the top-level elements)."""
    builder = _Builder()
    builder.feed(html.decode() if isinstance(html, bytes) else html)
    builder.close()
    return builder.root
