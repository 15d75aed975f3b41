"""What generation costs: the one `Price`, price tables, and the price an eval was run at.

Covers: `Price` (USD per million input / output tokens, plus USD per hour of
generation time), `price_for` (a table's entry for a model name: exact, else
the longest prefix, else `default`), `parse_price` (the `IN,OUT[,PER_HOUR]`
text of `posttrain eval --price`), `price_table` (a `--prices` JSON file and
a `--price` default merged into the plain-dict table an eval stores in its
meta) and `price_of` (the `Price` an eval's stored meta says its model costs).
A leaf module (standard library only), so the engines (an `OpenAIEngine`
counting its spend) and the evaluation (cost per solved task) share one
`Price` without the engine package depending on the eval package.
Does not cover: summing costs over records (`eval/summary.py`).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from posttrain.errors import UserError

PRICE_FIELDS = ("input_per_mtok", "output_per_mtok", "per_hour")


class PriceError(UserError, ValueError):
    """A price or price table a user gave that cannot be read (one line, exit 2)."""


@dataclass(frozen=True)
class Price:
    """What a model costs: USD per million input / output tokens, plus USD per hour of generation time
    (for a local GPU or CPU, where the tokens are free but the machine is not)."""

    input_per_mtok: float = 0.0
    output_per_mtok: float = 0.0
    per_hour: float = 0.0

    def cost(self, tokens_in: float, tokens_out: float, seconds: float = 0.0) -> float:
        return (tokens_in * self.input_per_mtok + tokens_out * self.output_per_mtok) / 1e6 + seconds * self.per_hour / 3600


def price_for(model: str, table: dict[str, Price]) -> Price:
    """The table's entry for `model`: an exact name, else the longest key that prefixes it, else `default`, else free."""
    if model in table:
        return table[model]
    prefixes = [k for k in table if k != "default" and model.startswith(k)]
    if prefixes:
        return table[max(prefixes, key=len)]
    return table.get("default", Price())


def parse_price(text: str) -> Price:
    """`IN,OUT[,PER_HOUR]`: USD per million input and output tokens (and per hour of generation)."""
    try:
        parts = [float(x) for x in text.split(",")]
    except ValueError:
        raise PriceError(f"--price takes IN,OUT[,PER_HOUR] numbers (USD per million tokens, per hour), got {text!r}") from None
    if not 2 <= len(parts) <= 3:
        raise PriceError(f"--price takes IN,OUT[,PER_HOUR], got {text!r}")
    return Price(*parts)


def price_table(price: str | None = None, prices: Path | None = None) -> dict[str, dict[str, float]]:
    """The price settings as an eval stores them in its meta: a `--prices` JSON table by model name
    ({model: {input_per_mtok, output_per_mtok, per_hour}}) with `--price` as its `default` entry."""
    table: dict[str, dict[str, float]] = {}
    if prices is not None:
        try:
            table = json.loads(prices.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise PriceError(f"--prices {prices}: {exc}") from None
        if not isinstance(table, dict):
            raise PriceError(f"--prices {prices}: expected a JSON object {{model: {{{', '.join(PRICE_FIELDS)}}}}}")
    if price is not None:
        table["default"] = asdict(parse_price(price))
    return table


def prices_from_table(table: dict[str, dict[str, float]]) -> dict[str, Price]:
    """A stored table (plain dicts) as `Price` records."""
    try:
        return {name: Price(**fields) for name, fields in table.items()}
    except TypeError as exc:
        raise PriceError(f"price table: {exc} (fields are {', '.join(PRICE_FIELDS)})") from None


def price_of(meta: dict[str, Any]) -> Price:
    """The `Price` an eval's meta says its model costs (free when it says nothing): the entry of its
    `prices` table for the served model name (an endpoint's), else for the `model` it was given."""
    table = prices_from_table(meta.get("prices") or {})
    name = (meta.get("model_info") or {}).get("served_model") or meta.get("model") or ""
    return price_for(str(name), table)
