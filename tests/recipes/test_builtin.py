"""The built-in base model: deterministic from a seed, stops on accuracy (capped), cached once per machine."""

import json
import threading

import pytest
import torch
from safetensors.torch import load_file

from posttrain.config import BaseModelConfig
from posttrain.models import load_model
from posttrain.recipes.builtin import base_key, cache_root, ensure_base


def _cfg(tmp_path, **kw):
    small = dict(hidden_size=16, num_layers=1, intermediate_size=32, num_heads=2, digits=1, batch_size=16,
                 max_steps=6, eval_every=3, eval_size=16, cache_dir=str(tmp_path))
    small.update(kw)
    return BaseModelConfig(**small)


@pytest.mark.slow
def test_builds_then_reuses_the_cache(tmp_path):
    cfg = _cfg(tmp_path, target_low=1.0, target_high=1.0)  # unreachable: runs to the step cap
    first = ensure_base(cfg)
    assert not first.cached and first.steps == 6
    assert not first.in_band
    again = ensure_base(cfg)
    assert again.cached and again.path == first.path and again.accuracy == first.accuracy
    model, tok = load_model(first.path)
    assert model.config.hidden_size == 16 and tok.encode("1+1=")[0] == tok.bos_id


@pytest.mark.slow
def test_stops_as_soon_as_the_band_is_reached(tmp_path):
    build = ensure_base(_cfg(tmp_path, target_low=0.0))
    assert build.steps == 3  # the first evaluation already satisfies accuracy >= 0.0


@pytest.mark.slow
def test_same_seed_same_weights_different_seed_different(tmp_path):
    a = ensure_base(_cfg(tmp_path / "a"))
    b = ensure_base(_cfg(tmp_path / "b"))
    c = ensure_base(_cfg(tmp_path / "c", seed=1))
    wa, wb, wc = (load_file(str(x.path / "model.safetensors")) for x in (a, b, c))
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    assert any(not torch.equal(wa[k], wc[k]) for k in wa)


class _Stopped(Exception):
    """A build stopped at a check (as a killed process would be, after its last partial was written)."""


def _stop_at(at):
    def on_eval(step, accuracy):
        if step == at:
            raise _Stopped

    return on_eval


@pytest.mark.slow
def test_a_stopped_build_resumes_from_its_last_check_to_the_uninterrupted_base(tmp_path):
    unreachable = dict(target_low=1.0, target_high=1.0, max_steps=9)  # runs to the cap: checks at 3, 6 and 9
    whole = ensure_base(_cfg(tmp_path / "whole", **unreachable))
    cfg = _cfg(tmp_path / "stopped", **unreachable)
    partial = cache_root(cfg) / f".{base_key(cfg)}.partial.pt"
    with pytest.raises(_Stopped):
        ensure_base(cfg, on_eval=_stop_at(6))  # stopped at the second check: the first one's state is on disk
    assert partial.exists() and not (cache_root(cfg) / base_key(cfg)).exists()
    seen = []
    resumed = ensure_base(cfg, on_eval=lambda step, accuracy: seen.append(step))
    assert seen == [6, 9]  # steps 1-3 were not trained again
    assert (resumed.steps, resumed.accuracy, resumed.in_band) == (whole.steps, whole.accuracy, whole.in_band)
    assert resumed.resumed_from == 3 and whole.resumed_from is None
    a, b = (load_file(str(x.path / "model.safetensors")) for x in (whole, resumed))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)  # weight for weight
    meta = json.loads((resumed.path / "base.json").read_text())
    assert meta["resumed_from"] == 3 and [c[0] for c in meta["checks"]] == [3, 6, 9] and not partial.exists()


@pytest.mark.slow
def test_a_stopped_build_of_another_build_or_a_torn_one_is_never_resumed(tmp_path):
    unreachable = dict(target_low=1.0, target_high=1.0, max_steps=6)
    whole = ensure_base(_cfg(tmp_path / "whole", **unreachable))
    for plant in ("another", "torn"):
        cfg = _cfg(tmp_path / plant, **unreachable)
        partial = cache_root(cfg) / f".{base_key(cfg)}.partial.pt"
        with pytest.raises(_Stopped):
            ensure_base(cfg, on_eval=_stop_at(6))
        if plant == "another":  # planted: the builder's code or torch changed since it stopped
            state = torch.load(partial, weights_only=False)
            torch.save({**state, "fingerprint": state["fingerprint"] + "-edited"}, partial)
        else:  # planted: half a file
            partial.write_bytes(partial.read_bytes()[:1000])
        seen = []
        with pytest.warns(UserWarning, match="not resuming the stopped build .*(another build|unreadable)"):
            again = ensure_base(cfg, on_eval=lambda step, accuracy, seen=seen: seen.append(step))
        assert seen == [3, 6]  # from the start
        a, b = (load_file(str(x.path / "model.safetensors")) for x in (whole, again))
        assert all(torch.equal(a[k], b[k]) for k in a)
        assert json.loads((again.path / "base.json").read_text())["resumed_from"] is None


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


@pytest.mark.slow
def test_an_agent_base_is_checked_with_its_current_weights(tmp_path, monkeypatch):
    """Every band check runs on the weights as they are now: the engine is told they moved (its version is the
    step), so it forgets the prefix KV it cached at an earlier check; a stale prefix made every episode fail."""
    import torch

    import posttrain.recipes.builtin as builtin
    from posttrain.models import char_tokenizer
    from posttrain.types import SamplingParams

    versions = []

    def check(engine, tasks, spec=None):
        versions.append(engine.policy_version)
        return 0.0

    monkeypatch.setattr(builtin, "_episode_success", check)
    monkeypatch.setattr(builtin, "COPY_PHASE_STEPS", 0)  # no band check runs in the copy phase (300 steps)
    cfg = BaseModelConfig(family="lookup", hidden_size=16, num_layers=1, intermediate_size=32, num_heads=2,
                          batch_size=4, max_steps=6, eval_every=3, eval_size=16, cache_dir=str(tmp_path))
    build = ensure_base(cfg)
    assert versions == [3, 6] and build.steps == 6 and not build.in_band
    # what the version buys: a weight change without it leaves the cached prefix KV of the old weights in use
    from posttrain.engine.build import build_engine

    model, tok = load_model(build.path)
    engine = build_engine(None, model, char_tokenizer())
    prompt, params = char_tokenizer().encode("x" * 300), SamplingParams(temperature=0.0, max_tokens=2)
    engine.generate([prompt], params)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05)
    stale = engine.generate([prompt], params)[0][0].logprobs
    engine.set_version(1)
    fresh = engine.generate([prompt], params)[0][0].logprobs
    assert stale != fresh


def test_agent_trace_windows_hold_the_instruction_and_train_only_on_calls():
    """A window of a later call must show which key to follow (the instruction), or the copy among a file's
    lines is a guess; the instruction is context only, and no token is trained on a predecessor it lacks in the
    episode."""
    import random

    from posttrain.agent.lookup import LookupSource, instruction, instruction_span, oracle_trace
    from posttrain.models.tokenizer import char_tokenizer
    from posttrain.recipes.builtin import AGENT_WINDOW, _trace_batch, _trace_window

    tok = char_tokenizer()
    tasks = LookupSource(hops=3, min_hops=3).take(8, "train", seed=0)
    rng = random.Random(0)
    for task in tasks:
        ids, mask = oracle_trace(task, tok)
        weight = [float(m) for m in mask]
        keep = instruction_span(task, tok)
        for _ in range(10):
            # the window of positions: which episode token each window token is
            pos, w = _trace_window(list(range(len(ids))), weight, rng, AGENT_WINDOW, keep)
            assert set(range(*keep)) <= set(pos)  # the whole instruction, in order
            assert len(pos) <= AGENT_WINDOW + keep[1] - keep[0]
            assert w[-1] == 1.0 and (pos[-1] + 1 == len(ids) or not weight[pos[-1] + 1])  # it ends where a call ends
            for j in range(1, len(pos)):
                if w[j]:  # trained: a call token, after its own predecessor
                    assert mask[pos[j]] and pos[j - 1] == pos[j] - 1 and w[j] == weight[pos[j]]
    ids, mask = _trace_batch(tok, tasks, random.Random(1), AGENT_WINDOW)
    for row, task in zip(ids.tolist(), tasks):
        assert instruction(task.meta["key"]) in tok.decode([i for i in row if i != tok.pad_id])


def test_keys_of_bases_built_before_worked_solutions_are_unchanged(tmp_path):
    """`worked` joins the cache key only when set: every base cached before it existed is still found."""
    assert base_key(BaseModelConfig()) == "arith-add-d2-s0-9f199c7a74"
    assert base_key(BaseModelConfig(family="sub", seed=2)) == "arith-sub-d2-s2-c1a3d5700b"
    assert base_key(BaseModelConfig(family="mul")) != base_key(BaseModelConfig(family="mul", worked=False))


@pytest.mark.slow
def test_a_worked_base_learns_the_solution_and_is_checked_on_the_product(tmp_path):
    from posttrain.models.tokenizer import char_tokenizer
    from posttrain.recipes.builtin import _batch, base_task_source

    cfg = _cfg(tmp_path, family="mul", digits=2, target_low=1.0, target_high=1.0)
    assert cfg.worked
    task = next(t for t in base_task_source(cfg).take(50, "train") if ";" in t.meta["solution"])
    tok = char_tokenizer()
    ids, mask = _batch(tok, [task])
    target = tok.decode([int(i) for i, m in zip(ids[0, 1:], mask[0]) if m])
    assert target == task.meta["solution"]  # the loss covers the whole worked solution
    build = ensure_base(cfg)  # band checks decode the solution and read its last number: runs to the cap
    assert build.steps == cfg.max_steps and 0.0 <= build.accuracy <= 1.0
