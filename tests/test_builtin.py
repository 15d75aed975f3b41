"""The built-in base model: deterministic from a seed, stops on accuracy (capped), cached once per machine."""

import threading

import torch
from safetensors.torch import load_file

from posttrain.builtin import base_key, ensure_base
from posttrain.config import BaseModelConfig
from posttrain.models import load_model


def _cfg(tmp_path, **kw):
    small = dict(hidden_size=16, num_layers=1, intermediate_size=32, num_heads=2, digits=1, batch_size=16,
                 max_steps=6, eval_every=3, eval_size=16, cache_dir=str(tmp_path))
    small.update(kw)
    return BaseModelConfig(**small)


def test_builds_then_reuses_the_cache(tmp_path):
    cfg = _cfg(tmp_path, target_low=1.0, target_high=1.0)  # unreachable: runs to the step cap
    first = ensure_base(cfg)
    assert not first.cached and first.steps == 6
    assert not first.in_band
    again = ensure_base(cfg)
    assert again.cached and again.path == first.path and again.accuracy == first.accuracy
    model, tok = load_model(first.path)
    assert model.config.hidden_size == 16 and tok.encode("1+1=")[0] == tok.bos_id


def test_stops_as_soon_as_the_band_is_reached(tmp_path):
    build = ensure_base(_cfg(tmp_path, target_low=0.0))
    assert build.steps == 3  # the first evaluation already satisfies accuracy >= 0.0


def test_same_seed_same_weights_different_seed_different(tmp_path):
    a = ensure_base(_cfg(tmp_path / "a"))
    b = ensure_base(_cfg(tmp_path / "b"))
    c = ensure_base(_cfg(tmp_path / "c", seed=1))
    wa, wb, wc = (load_file(str(x.path / "model.safetensors")) for x in (a, b, c))
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    assert any(not torch.equal(wa[k], wc[k]) for k in wa)


def test_concurrent_callers_build_once(tmp_path):
    cfg = _cfg(tmp_path)
    results = []
    threads = [threading.Thread(target=lambda: results.append(ensure_base(cfg))) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(r.cached for r in results) == [False, True]
    assert len({r.path for r in results}) == 1


def test_cache_key_ignores_location_but_not_settings(tmp_path):
    assert base_key(_cfg(tmp_path / "x")) == base_key(_cfg(tmp_path / "y"))
    assert base_key(_cfg(tmp_path)) != base_key(_cfg(tmp_path, seed=3))
