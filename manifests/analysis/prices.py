"""The per-model price table: relative units (docs/analysis.md), USD overrides, and cache facts.

Relative prices are units per 1k tokens, for comparing strategies, not a provider's bill:
input 1, output 4, cache read 0.1, cache write 1.25 by default. USD prices are the model's own
from genai-prices' bundled table (``ctxkit.models``), each kind replaceable by a price row's
USD column (per million tokens) for a model the table misprices or does not know.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from fnmatch import fnmatchcase

from ctxkit.models import UsdPrices, model_facts
from manifests.models import ModelPrice

_PER_MTOK = 1_000_000.0


@dataclass(frozen=True, slots=True)
class Price:
    input_per_1k: float = 1.0
    output_per_1k: float = 4.0
    cache_read_per_1k: float = 0.1
    cache_write_per_1k: float = 1.25
    cache_ttl_seconds: int = 300
    min_cacheable_tokens: int = 1024
    effective_limit_ratio: float = 0.25
    # USD per million tokens; None: the model's price in genai-prices' table.
    input_usd_per_mtok: float | None = None
    output_usd_per_mtok: float | None = None
    cache_read_usd_per_mtok: float | None = None
    cache_write_usd_per_mtok: float | None = None
    cache_write_1h_usd_per_mtok: float | None = None

    @property
    def weights(self) -> dict[str, float]:
        """Per-token weights for ctxkit.figures.cost_units (the table holds prices per 1k)."""
        return {"input": self.input_per_1k / 1000.0, "output": self.output_per_1k / 1000.0,
                "cache_read": self.cache_read_per_1k / 1000.0, "cache_write": self.cache_write_per_1k / 1000.0}

    def usd(self, table: UsdPrices | None) -> UsdPrices | None:
        """The USD prices per token: the row's USD columns over the table's prices (``table``:
        the model's own, None when the table does not know it). None without an input or an
        output price; a kind without a price costs its parent's (genai-prices' rule)."""
        def pick(row: float | None, fallback: float | None) -> float | None:
            return row / _PER_MTOK if row is not None else fallback

        base = pick(self.input_usd_per_mtok, table.input if table else None)
        output = pick(self.output_usd_per_mtok, table.output if table else None)
        if base is None or output is None:
            return None
        write = pick(self.cache_write_usd_per_mtok, table.cache_write if table else None)
        write = base if write is None else write
        read = pick(self.cache_read_usd_per_mtok, table.cache_read if table else None)
        write_1h = pick(self.cache_write_1h_usd_per_mtok, table.cache_write_1h if table else None)
        return UsdPrices(input=base, output=output, cache_read=base if read is None else read, cache_write=write,
                         cache_write_1h=write if write_1h is None else write_1h)


DEFAULT_PRICE = Price()
_WILDCARDS = frozenset("*?[")


def _specificity(pattern: str) -> tuple[int, int]:
    """Fewer wildcards first, then longer literal text: 'claude-sonnet-4-5' beats
    'claude-sonnet-*' beats 'claude-*' beats '*'."""
    wildcards = sum(1 for ch in pattern if ch in _WILDCARDS)
    return wildcards, -(len(pattern) - wildcards)


def usd_prices(price: Price, model: str, provider: str, input_tokens: int, at: datetime) -> UsdPrices | None:
    """The USD prices per token of one call of ``model``: the price row's USD columns over the
    model's own prices in genai-prices' table, at the call's date and, for tiered prices, for
    its input."""
    facts = model_facts(model, provider or None)
    return price.usd(facts.prices_at(input_tokens, at) if facts is not None else None)


class PriceBook:
    """The price table, loaded once per analysis chunk and matched per model name."""

    def __init__(self, rows: list[tuple[str, Price]]) -> None:
        self._rows = sorted(rows, key=lambda r: (_specificity(r[0]), r[0]))
        self._memo: dict[str, Price] = {}

    @classmethod
    def load(cls, table: type[ModelPrice] = ModelPrice) -> PriceBook:
        """The price book of ``table`` (a migration passes its historical model, which may
        predate the USD columns)."""
        usd_columns = ("input_usd_per_mtok", "output_usd_per_mtok", "cache_read_usd_per_mtok",
                       "cache_write_usd_per_mtok", "cache_write_1h_usd_per_mtok")
        names = {f.name for f in table._meta.get_fields()}
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
                        **{c: getattr(p, c) for c in usd_columns if c in names},
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

    def usd(self, model: str, provider: str, input_tokens: int, at: datetime) -> UsdPrices | None:
        """:func:`usd_prices` of a call of ``model`` at its price row."""
        return usd_prices(self.for_model(model), model, provider, input_tokens, at)
