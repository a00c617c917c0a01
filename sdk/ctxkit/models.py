"""Model facts: a model's context window and its USD prices per token kind.

The facts come from the ``genai-prices`` package's bundled table (installed with
``ctxkit[proxy]``, ``ctxkit[anthropic]`` and ``ctxkit[openai]``, and by the server): no network
access, ever; upgrading the package refreshes them. Without the package, or for a model its
table does not know, :func:`window_for` falls back to a model-family guess and says the window
was assumed (:data:`WINDOW_ASSUMED` opens the manifest warning that states it), and
:func:`model_facts` answers None (no USD price).

Prices are USD per token (the table's per-million prices over 1,000,000), the standard prices
of the call's date (not batch or priority variants). A tiered price (the whole prompt pays the
tier its input reaches) is resolved by :meth:`ModelFacts.prices_at`. A kind the table has no
price for costs what its parent kind costs, as in genai-prices: a cache read or write the
input price, a 1-hour cache write the (5-minute) cache write price.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

__all__ = ["DEFAULT_WINDOW", "ModelFacts", "UsdPrices", "WINDOW_ASSUMED", "format_usd", "model_facts", "window_for"]

DEFAULT_WINDOW = 128_000
# Opens the warning of a manifest whose window was assumed (neither stated nor in the table).
WINDOW_ASSUMED = "window assumed"
# The guess for a model the table does not know, by family: longest listed prefix first wins.
_FAMILY_WINDOWS: tuple[tuple[str, int], ...] = (
    ("claude", 200_000),
    ("gpt-4.1", 1_047_576),
    ("gpt-5", 400_000),
    ("gpt-4o", 128_000),
    ("o1", 200_000),
    ("o3", 200_000),
    ("o4", 200_000),
    ("gemini", 1_048_576),
)
_PER_MTOK = Decimal(1_000_000)


@dataclass(frozen=True, slots=True)
class UsdPrices:
    """USD per token of each kind: uncached input, output, cache read, cache write (5-minute
    TTL) and 1-hour cache write."""

    input: float
    output: float
    cache_read: float
    cache_write: float
    cache_write_1h: float

    @property
    def weights(self) -> dict[str, float]:
        """The prices as ``ctxkit.figures`` weights (``cost_usd``, ``cache_saving``)."""
        return {"input": self.input, "output": self.output, "cache_read": self.cache_read,
                "cache_write": self.cache_write, "cache_write_1h": self.cache_write_1h}


@dataclass(frozen=True, slots=True)
class ModelFacts:
    """One model as the table knows it: its id there, its window (None: not stated) and its
    prices (by date, each kind a flat price or tiers)."""

    model_id: str
    window: int | None
    _info: Any

    def prices_at(self, input_tokens: int = 0, at: datetime | None = None) -> UsdPrices | None:
        """The USD prices of a call with ``input_tokens`` of input (tiers), made at ``at``
        (None: now); None when the table has no input or output price for the model."""
        price = self._info.get_prices(at or datetime.now(tz=UTC))
        base_in = _resolve(price.input_mtok, input_tokens)
        output = _resolve(price.output_mtok, input_tokens)
        if base_in is None or output is None:
            return None
        read = _resolve(price.cache_read_mtok, input_tokens)
        write = _resolve(price.cache_write_mtok, input_tokens)
        write = base_in if write is None else write
        write_1h = _resolve(price.cache_write_1h_mtok, input_tokens)
        return UsdPrices(input=float(base_in / _PER_MTOK), output=float(output / _PER_MTOK),
                         cache_read=float((base_in if read is None else read) / _PER_MTOK),
                         cache_write=float(write / _PER_MTOK),
                         cache_write_1h=float((write if write_1h is None else write_1h) / _PER_MTOK))


def _resolve(price: Any, input_tokens: int) -> Decimal | None:
    """A table price for a call with ``input_tokens`` of input: a tiered price pays the
    highest tier whose start the input is above, for every token."""
    if price is None or isinstance(price, Decimal):
        return price
    chosen: Decimal = price.base
    for tier in price.tiers:
        if input_tokens > tier.start:
            chosen = tier.price
    return chosen


@functools.lru_cache(maxsize=4096)
def model_facts(model: str, provider: str | None = None) -> ModelFacts | None:
    """The table's facts for ``model`` (the provider narrows the search when the table
    knows it); None when genai-prices is not installed or does not know the model."""
    if not model:
        return None
    try:
        from genai_prices import data_snapshot
    except ImportError:
        return None
    snapshot = data_snapshot.get_snapshot()
    name = model.strip()
    for ref in dict.fromkeys((name, name.rsplit("/", 1)[-1])):
        for provider_id in dict.fromkeys((provider or None, None)):
            try:
                _, info = snapshot.find_provider_model(ref, None, provider_id, None)
            except LookupError:
                continue
            return ModelFacts(model_id=info.id, window=info.context_window, _info=info)
    return None


def format_usd(amount: float) -> str:
    """US dollars as people read them: 1234.5 -> '$1,234.50'; below a dollar three significant
    digits, so a call's cost of a few hundredths of a cent shows ('$0.000412')."""
    sign, amount = ("-" if amount < 0 else ""), abs(amount)
    if amount >= 1 or amount == 0:
        return f"{sign}${amount:,.2f}"
    decimals = min(9, max(2, 2 - math.floor(math.log10(amount))))
    return f"{sign}${amount:.{decimals}f}"


def window_for(model: str, provider: str | None = None) -> tuple[int, bool]:
    """(window, known) of a model: the table's context window, else (not known) the guess by
    model family, else :data:`DEFAULT_WINDOW`."""
    facts = model_facts(model, provider)
    if facts is not None and facts.window:
        return facts.window, True
    name = (model or "").lower().split("/")[-1]
    return next((window for prefix, window in _FAMILY_WINDOWS if name.startswith(prefix)), DEFAULT_WINDOW), False
