"""Price rows: what a row of the price table may say (docs/analysis.md, "Prices and model
facts"), stated once as :class:`PriceRowSerializer`. The admin's price table (add, change and
its editable list) validates with it, naming each bad field; the analysis reads the rows
through manifests/analysis/prices.py.
"""

from __future__ import annotations

from typing import Any

from django.db import models

from ctxkit.manifest import MAX_TOKENS
from manifests.inputs import InputError, InputSerializer, Number, Text, Whole, validated
from manifests.models import ModelPrice

MAX_PATTERN = ModelPrice._meta.get_field("model_pattern").max_length or 200
MAX_PRICE = 1_000_000.0  # relative units per 1k tokens
MAX_USD = 1_000_000.0  # US dollars per million tokens
MAX_TTL_SECONDS = 7 * 24 * 3600
MIN_RATIO = 0.01


def _default(name: str) -> Any:
    """The column's default (the ``*`` row's value)."""
    field = ModelPrice._meta.get_field(name)
    assert isinstance(field, models.Field)
    return field.default


class PriceRowInputError(InputError):
    """A bad price row; ``errors`` name each bad field."""


def _price(name: str, what: str) -> Number:
    return Number(default=_default(name), min_value=0, max_value=MAX_PRICE, help_text=f"{what}, per 1k tokens",
                  says=f"must be a price per 1k tokens in relative units, 0 to {MAX_PRICE:g}")


def _usd(what: str) -> Number:
    return Number(allow_null=True, default=None, min_value=0, max_value=MAX_USD,
                  help_text=f"{what}, USD per million tokens; empty: the model's price in genai-prices' table",
                  says=f"must be a price in US dollars per million tokens, 0 to {MAX_USD:g}, or empty")


class PriceRowSerializer(InputSerializer):
    """A row of the price table: the model names it applies to, its relative prices, its USD
    prices where they replace the table's, and the model's cache facts."""

    noun = "price row"

    model_pattern = Text(max_length=MAX_PATTERN, help_text="A model name, or an fnmatch pattern: claude-sonnet-*",
                         says=f"must be a model name or pattern of 1 to {MAX_PATTERN} characters "
                              "without control characters")
    input_per_1k = _price("input_per_1k", "Uncached input")
    output_per_1k = _price("output_per_1k", "Output")
    cache_read_per_1k = _price("cache_read_per_1k", "Input read from the prompt cache")
    cache_write_per_1k = _price("cache_write_per_1k", "Input written to the prompt cache")
    input_usd_per_mtok = _usd("Uncached input")
    output_usd_per_mtok = _usd("Output")
    cache_read_usd_per_mtok = _usd("Input read from the prompt cache")
    cache_write_usd_per_mtok = _usd("Input written to the prompt cache with a 5-minute TTL")
    cache_write_1h_usd_per_mtok = _usd("Input written to the prompt cache with a 1-hour TTL")
    cache_ttl_seconds = Whole(default=_default("cache_ttl_seconds"), min_value=0, max_value=MAX_TTL_SECONDS,
                              help_text="The provider's prompt-cache TTL",
                              says=f"must be a whole number of seconds, 0 to {MAX_TTL_SECONDS}")
    min_cacheable_tokens = Whole(default=_default("min_cacheable_tokens"), min_value=0, max_value=MAX_TOKENS,
                                 help_text="Shortest prefix the provider caches",
                                 says=f"must be a whole number of tokens, 0 to {MAX_TOKENS}")
    effective_limit_ratio = Number(default=_default("effective_limit_ratio"), min_value=MIN_RATIO, max_value=1,
                                   help_text="Share of the window the model uses well (context rot: 1/4 to 1/10)",
                                   says=f"must be a share of the window, {MIN_RATIO:g} to 1")


def check_row(data: dict[str, Any], *, partial: bool = False) -> dict[str, Any]:
    """``data`` as a price row (``partial``: only the fields it has, as the admin's editable
    list sends them). Raises PriceRowInputError naming every bad field."""
    return validated(PriceRowSerializer, data, root="", form=False, error=PriceRowInputError, partial=partial)
