"""What every context operator returns besides its text: :class:`OpRecord`; and the safe-first order.

Shared by the operator modules (``ctxkit.context.operators`` re-exports both).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, TypeVar

import msgspec

T = TypeVar("T")

# The safe-first order: lossless before recoverable before lossy.
SAFE_ORDER = ("dedupe", "ref", "extract", "summarize", "truncate", "window", "hard_cut")


# The data of a record made without any: empty and read-only, so records never share a mutable dict.
NO_DATA: Mapping[str, Any] = MappingProxyType({})


class OpRecord(msgspec.Struct, frozen=True, gc=False):
    """What one operator did. A frozen struct: an immutable value, quick to make and not tracked by
    the cyclic collector (an allocation makes one for every segment it cuts, at every call)."""

    op: str
    tokens_before: int
    tokens_after: int
    detail: str = ""
    data: Mapping[str, Any] = NO_DATA

    def to_dict(self) -> dict[str, Any]:
        return {
            "op": self.op,
            "tokens_before": self.tokens_before,
            "tokens_after": self.tokens_after,
            "detail": self.detail,
            "data": dict(self.data),
        }


def memo(fn: Callable[[str], T]) -> Callable[[str], T]:
    """``fn`` (a pure function of a string) with a memo, for one batch of work.

    The allocator wraps the line scorer in one for each call: lines repeat across segments
    (a chunk retrieved twice, the same log line in two tool results). Scope it to one call;
    it keeps every string it saw.
    """
    cache: dict[str, T] = {}

    def call(text: str) -> T:
        if text in cache:
            return cache[text]
        out = cache[text] = fn(text)
        return out

    return call
