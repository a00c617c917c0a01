"""The per-model price table (relative units, docs/analysis.md) and cache facts.

Prices are relative units per 1k tokens, for comparing strategies, not a
provider's bill: input 1, output 4, cache read 0.1, cache write 1.25 by default.
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase

from manifests.models import ModelPrice


@dataclass(frozen=True, slots=True)
class Price:
    input_per_1k: float = 1.0
    output_per_1k: float = 4.0
    cache_read_per_1k: float = 0.1
    cache_write_per_1k: float = 1.25
    cache_ttl_seconds: int = 300
    min_cacheable_tokens: int = 1024
    effective_limit_ratio: float = 0.25

    @property
    def weights(self) -> dict[str, float]:
        """Per-token weights for ctxkit.figures.cost_units (the table holds prices per 1k)."""
        return {"input": self.input_per_1k / 1000.0, "output": self.output_per_1k / 1000.0,
                "cache_read": self.cache_read_per_1k / 1000.0, "cache_write": self.cache_write_per_1k / 1000.0}


DEFAULT_PRICE = Price()
_WILDCARDS = frozenset("*?[")


def _specificity(pattern: str) -> tuple[int, int]:
    """Fewer wildcards first, then longer literal text: 'claude-sonnet-4-5' beats
    'claude-sonnet-*' beats 'claude-*' beats '*'."""
    wildcards = sum(1 for ch in pattern if ch in _WILDCARDS)
    return wildcards, -(len(pattern) - wildcards)


class PriceBook:
    """The price table, loaded once per analysis chunk and matched per model name."""

    def __init__(self, rows: list[tuple[str, Price]]) -> None:
        self._rows = sorted(rows, key=lambda r: (_specificity(r[0]), r[0]))
        self._memo: dict[str, Price] = {}

    @classmethod
    def load(cls, table: type[ModelPrice] = ModelPrice) -> PriceBook:
        """The price book of ``table`` (a migration passes its historical model)."""
        return cls(
            [
                (
                    p.model_pattern,
                    Price(
                        input_per_1k=p.input_per_1k,
                        output_per_1k=p.output_per_1k,
                        cache_read_per_1k=p.cache_read_per_1k,
                        cache_write_per_1k=p.cache_write_per_1k,
                        cache_ttl_seconds=p.cache_ttl_seconds,
                        min_cacheable_tokens=p.min_cacheable_tokens,
                        effective_limit_ratio=p.effective_limit_ratio,
                    ),
                )
                for p in table.objects.all()
            ]
        )

    def for_model(self, model: str) -> Price:
        price = self._memo.get(model)
        if price is None:
            price = next((p for pattern, p in self._rows if fnmatchcase(model, pattern)), DEFAULT_PRICE)
            self._memo[model] = price
        return price
