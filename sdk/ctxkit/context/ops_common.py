"""What every context operator returns besides its text: :class:`OpRecord`; and the safe-first order.

Split out of ``ctxkit.context.operators`` (which re-exports both) so the operator modules can share it
without importing each other.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")

# The seed's safe-first order: lossless before recoverable before lossy.
SAFE_ORDER = ("dedupe", "ref", "extract", "summarize", "truncate", "window", "hard_cut")


@dataclass(frozen=True, slots=True, init=False)
class OpRecord:
    """What one operator did."""

    op: str
    tokens_before: int
    tokens_after: int
    detail: str = ""
    data: dict[str, Any] = field(default_factory=dict)

    # Hand-written: the generated __init__ of a frozen dataclass sets each field through
    # object.__setattr__, which made building records a visible share of an allocation.
    # Setting the slots directly is the same object, about twice as fast to make. The operators
    # make theirs with op_record() below, faster again.
    def __init__(
        self, op: str, tokens_before: int, tokens_after: int, detail: str = "", data: dict[str, Any] | None = None
    ) -> None:
        _SET_OP(self, op)
        _SET_BEFORE(self, tokens_before)
        _SET_AFTER(self, tokens_after)
        _SET_DETAIL(self, detail)
        _SET_DATA(self, {} if data is None else data)

    def to_dict(self) -> dict[str, Any]:
        return {
            "op": self.op,
            "tokens_before": self.tokens_before,
            "tokens_after": self.tokens_after,
            "detail": self.detail,
            "data": self.data,
        }


_SET_OP, _SET_BEFORE, _SET_AFTER, _SET_DETAIL, _SET_DATA = (
    OpRecord.__dict__[name].__set__ for name in ("op", "tokens_before", "tokens_after", "detail", "data")
)


class _UnfrozenRecord:
    """OpRecord's slot layout without its frozen ``__setattr__``: fields are set by plain attribute
    stores (the interpreter's fast path for slots), then the object becomes an OpRecord by
    ``__class__`` assignment, which CPython allows between classes of the same slots."""

    __slots__ = OpRecord.__slots__


def op_record(op: str, tokens_before: int, tokens_after: int, detail: str, data: dict[str, Any]) -> OpRecord:
    """``OpRecord(op, tokens_before, tokens_after, detail, data)``: the same (equal, frozen) record,
    about twice as fast to make as through ``__init__``. The operators make one per cut in every
    allocation."""
    rec = _UnfrozenRecord()
    rec.op = op
    rec.tokens_before = tokens_before
    rec.tokens_after = tokens_after
    rec.detail = detail
    rec.data = data
    rec.__class__ = OpRecord  # type: ignore[assignment]
    return rec  # type: ignore[return-value]


def memo(fn: Callable[[str], T]) -> Callable[[str], T]:
    """``fn`` (a pure function of a string) with a memo, for one batch of work.

    The allocator wraps the line scorer in one for each call: lines repeat across segments
    (a chunk retrieved twice, the same log line in two tool results). Scope it to one call;
    it keeps every string it saw.
    """
    cache: dict[str, T] = {}

    def call(text: str) -> T:
        out = cache.get(text, cache)
        if out is cache:
            out = cache[text] = fn(text)
        return out  # type: ignore[return-value]

    return call
