"""Manifests built from hand-made exchanges by the mapping a running proxy uses, sent nowhere."""

from __future__ import annotations

from typing import Any

from ctxkit.manifest import Manifest
from ctxkit.proxy.capture import Capture


def build_all(*exchanges: Any) -> list[Manifest]:
    """The manifest of each exchange, built in order by one Capture (one run resolver, as a
    running proxy has) and sent nowhere."""
    capture = Capture(sink=None)
    out = []
    for exchange in exchanges:
        manifest = capture.build(exchange)
        assert manifest is not None
        out.append(manifest)
    return out
