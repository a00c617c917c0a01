"""The fast duplicate-key proof (manifests/ingest/dupkeys.py): it must say "no duplicate" for the
bodies other JSON libraries write (or ingest pays the slow parse for nothing), and never for
a body with a repeated key anywhere, whatever the layout; the door then names each one."""

from __future__ import annotations

import json
import re

import orjson
import pytest

from manifests.ingest import decode
from manifests.ingest.dupkeys import no_duplicate_keys
from tests.support import manifest


def tricky_manifest() -> dict:
    m = manifest("dupkeys")
    # Colons and quotes in text, an offset date: the colon count must not be fooled by them.
    m["items"][0]["reason"] = 'a: "b": c \\ : {"x": 1}'
    m["items"][0]["trust"] = "trusted"  # an explicit default: absent from the canonical form
    m["ended_at"] = "2026-11-29T11:00:05+01:00"
    return m


LAYOUTS = {
    "json.dumps": lambda m: json.dumps(m).encode(),
    "orjson": orjson.dumps,
    "indented": lambda m: json.dumps(m, indent=2).encode(),
    "spaced": lambda m: json.dumps(m, separators=(" , ", " : ")).encode(),
    "ascii escapes": lambda m: json.dumps(m, ensure_ascii=True).replace("item", "\\u0069tem").encode(),
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_it_proves_a_body_without_duplicates_in_any_layout(layout):
    raw = LAYOUTS[layout](tricky_manifest())
    assert decode(raw)[1] == []
    assert no_duplicate_keys(raw)


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_it_never_passes_a_repeated_key_and_the_door_names_it(layout):
    raw = LAYOUTS[layout](tricky_manifest())
    keys = list(re.finditer(rb'"([a-z_]+)"\s*:', raw))
    assert len(keys) > 50
    for key in keys:
        name = key.group(1).decode()
        # A first value of each kind, also one the field's type refuses (the last one counts).
        for value in (b"null", b"1", b'"x:y"', b"{" + key.group(0) + b" 7}"):
            bad = raw[: key.start()] + key.group(0) + b" " + value + b", " + raw[key.start() :]
            assert not no_duplicate_keys(bad), (name, value)
            manifest_, errors, _, _ = decode(bad)
            assert manifest_ is None
            assert any(e.message.startswith("duplicate key") and e.path.endswith("." + name) for e in errors), (
                name,
                errors,
            )


def test_an_escaped_colon_is_not_judged_fast_and_the_body_still_passes():
    m = tricky_manifest()
    m["items"][1]["reason"] = "a:b"
    raw = json.dumps(m).encode().replace(b"a:b", b"a\\u003ab")
    assert not no_duplicate_keys(raw)  # the slow path decides
    assert decode(raw)[1] == []
