"""The one `Price`: engines and evaluation share it; `--price` text and stored tables read back the same."""

from __future__ import annotations

import json

import pytest

from posttrain.errors import UserError
from posttrain.pricing import Price, parse_price, price_of, price_table


def test_engine_and_eval_share_one_price():
    from posttrain.engine.remote.openai_engine import Price as EnginePrice
    from posttrain.eval import Price as EvalPackagePrice
    from posttrain.eval.metrics import Price as MetricsPrice

    assert EnginePrice is Price and MetricsPrice is Price and EvalPackagePrice is Price
    assert Price(1.0, 2.0).cost(1_000_000, 500_000) == pytest.approx(2.0)  # the engine's positional use


def test_per_hour_price_parses_and_costs_seconds():
    p = parse_price("1,2,3.6")
    assert p == Price(1.0, 2.0, 3.6)
    assert p.cost(0, 0, seconds=10) == pytest.approx(0.01)
    assert parse_price("0.5,1.5").per_hour == 0.0


@pytest.mark.parametrize("text", ["1", "1,2,3,4", "a,b"])
def test_bad_price_text_is_a_user_error(text):
    with pytest.raises(UserError, match="--price takes IN,OUT"):
        parse_price(text)


def test_price_table_round_trips_through_an_eval_meta(tmp_path):
    path = tmp_path / "prices.json"
    path.write_text(json.dumps({"gpt-4o": {"input_per_mtok": 2.5, "output_per_mtok": 10.0}}))
    table = price_table("0,0,3.6", path)
    meta = json.loads(json.dumps({"model": "http://h/v1", "model_info": {"served_model": "gpt-4o-2024"}, "prices": table}))
    assert price_of(meta) == Price(2.5, 10.0)  # the served name, by prefix
    assert price_of({**meta, "model_info": {}}) == Price(per_hour=3.6)  # no entry for the spec: the default
    assert price_of({}) == Price()


def test_unreadable_price_table_is_a_user_error(tmp_path):
    bad = tmp_path / "p.json"
    bad.write_text("{oops")
    with pytest.raises(UserError, match="--prices"):
        price_table(None, bad)
    bad.write_text("[1, 2]")
    with pytest.raises(UserError, match="expected a JSON object"):
        price_table(None, bad)
    with pytest.raises(UserError, match="price table"):
        price_of({"prices": {"m": {"input_per_token": 1.0}}})
