"""What training must do, not only that it runs: reward and held-out accuracy rise; resume is exact after a
real crash (SIGKILL mid-run) and with the KL term on."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from posttrain.config import load_config
from posttrain.rl.trainer import Trainer
from posttrain.store import RunStore

TIMING = ("rollout_s", "learn_s", "step_s", "verifier_latency_p50", "verifier_latency_p95", "verifier_latency_max")


def _sevens(tmp_path: Path) -> Path:
    """Any prompt, one right answer: a task a tiny random model can learn in a few dozen GRPO steps."""
    path = tmp_path / "sevens.jsonl"
    path.write_text("".join(json.dumps({"id": f"q{i}", "prompt": f"{i}=", "answer": "7"}) + "\n" for i in range(300)))
    return path


def _cfg(tiny_model_dir, tmp_path, name, *extra):
    return load_config(None, [
        f"model.path='{tiny_model_dir}'", f"run_dir='{tmp_path / 'runs'}'", f"name='{name}'",
        f"tasks.source='{_sevens(tmp_path)}'", "tasks.held_out_fraction=0.2", "sampling.n=16", "sampling.max_tokens=1",
        "train.prompts_per_step=8", "eval.size=40", "train.checkpoint_every=0", "tensorboard=false", *extra,
    ])


@pytest.mark.slow
def test_training_raises_reward_and_held_out_accuracy(tiny_model_dir, tmp_path):
    cfg = _cfg(tiny_model_dir, tmp_path, "rise", "train.steps=30", "eval.every=30", "rl.lr=1e-2")
    trainer = Trainer(cfg)
    before = trainer.evaluate()["greedy_accuracy"]
    trainer.run()
    trainer.close()
    with RunStore(cfg.path / "run.sqlite") as store:
        rewards = [m["reward"] for _, m in store.steps()]
        after = store.evals("held_out")[-1][2]["greedy_accuracy"]
    early, late = sum(rewards[:5]) / 5, sum(rewards[-5:]) / 5
    assert late > early + 0.3, (early, late)  # a margin, not an exact value
    assert after > before + 0.5, (before, after)


@pytest.mark.slow
def test_training_learns_an_answer_that_depends_on_the_prompt(tiny_model_dir, tmp_path):
    """The answer is "7" for an odd number and "3" for an even one: a model that ignores its prompt scores
    at most one class, so both classes' held-out greedy accuracy must rise (the sevens task cannot show this)."""
    path = tmp_path / "parity.jsonl"
    path.write_text("".join(json.dumps({"id": f"p{i}", "prompt": f"{i}=", "answer": "7" if i % 2 else "3"}) + "\n"
                            for i in range(400)))
    cfg = _cfg(tiny_model_dir, tmp_path, "parity", "train.steps=40", "eval.every=40", "rl.lr=1e-2",
               f"tasks.source='{path}'")
    trainer = Trainer(cfg)
    trainer.evaluate()
    trainer.run()
    trainer.close()
    with RunStore(cfg.path / "run.sqlite") as store:
        rows = store.db.execute("SELECT task_id, passed FROM eval_samples WHERE name = 'held_out' AND step = 40").fetchall()
    by_class: dict[int, list[int]] = {0: [], 1: []}
    for task_id, passed in rows:
        by_class[int(task_id[1:]) % 2].append(passed)
    acc = {k: sum(v) / len(v) for k, v in by_class.items()}
    assert min(len(v) for v in by_class.values()) >= 5, by_class
    assert min(acc.values()) > 0.7, acc  # both classes: the prompt decides the answer


@pytest.mark.slow
def test_two_family_run_raises_held_out_accuracy_of_both(tiny_model_dir, tmp_path):
    """Two domains in one run (each its own JSONL family, one right answer per family): every family's
    held-out greedy accuracy must rise by a margin, not only the mixture's mean."""
    sevens = _sevens(tmp_path)
    threes = tmp_path / "threes.jsonl"
    threes.write_text("".join(json.dumps({"id": f"t{i}", "prompt": f"{i}?", "answer": "3"}) + "\n" for i in range(300)))
    cfg = load_config(None, [
        f"model.path='{tiny_model_dir}'", f"run_dir='{tmp_path / 'runs'}'", "name='two'",
        f"domains=[{{source='{sevens}', options={{held_out_fraction=0.2}}}}, "
        f"{{source='{threes}', options={{held_out_fraction=0.2}}}}]",
        "sampling.n=16", "sampling.max_tokens=1", "train.prompts_per_step=8", "eval.size=40",
        "train.checkpoint_every=0", "tensorboard=false", "train.steps=40", "eval.every=40", "rl.lr=1e-2",
        "rl.lr_schedule='cosine'",
    ])
    trainer = Trainer(cfg)
    trainer.evaluate()  # step 0: the starting model
    trainer.run()
    trainer.close()
    names = ["held_out", f"held_out:{trainer.parts.held_out[1].name}"]
    with RunStore(cfg.path / "run.sqlite") as store:
        for name in names:
            curve = [(step, m["greedy_accuracy"]) for step, _, m in store.evals(name)]
            assert curve[0][0] == 0 and curve[-1][0] == 40, curve
            assert curve[-1][1] > curve[0][1] + 0.4, (name, curve)  # a margin, not an exact value

def _steps(path: Path) -> list[tuple[int, dict]]:
    with RunStore(path / "run.sqlite") as store:
        return [(s, {k: v for k, v in m.items() if k not in TIMING}) for s, m in store.steps()]


def _write_toml(cfg, path: Path) -> Path:
    lines = [f'name = "{cfg.name}"', f'run_dir = "{cfg.run_dir}"', "tensorboard = false",
             "[model]", f'path = "{cfg.model.path}"',
             "[tasks]", f'source = "{cfg.tasks.source}"', "held_out_fraction = 0.2",
             "[sampling]", "n = 16", "max_tokens = 1",
             "[rl]", f"lr = {cfg.rl.lr}", f"kl_beta = {cfg.rl.kl_beta}",
             "[train]", f"steps = {cfg.train.steps}", "prompts_per_step = 8",
             f"checkpoint_every = {cfg.train.checkpoint_every}", "[eval]", "size = 40", f"every = {cfg.eval.every}"]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.slow
def test_resume_after_sigkill_mid_run_gives_identical_metrics(tiny_model_dir, tmp_path):
    extra = ("train.steps=8", "train.checkpoint_every=3", "eval.every=4", "rl.lr=1e-2", "rl.kl_beta=0.05")
    full = _cfg(tiny_model_dir, tmp_path, "full", *extra)
    t = Trainer(full)
    t.run()
    t.close()

    cut = _cfg(tiny_model_dir, tmp_path, "cut", *extra)
    toml = _write_toml(cut, tmp_path / "cut.toml")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[2] / "src"),
                                                         os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-m", "posttrain.cli", "train", str(toml)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    store_path = cut.path / "run.sqlite"
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:  # wait until step 4 is stored: one step past the checkpoint at 3
            if store_path.exists():
                with RunStore(store_path) as s:
                    if any(step >= 4 for step, _ in s.steps()):
                        break
            if proc.poll() is not None:
                raise AssertionError(f"the run ended before it could be killed: {proc.stderr.read().decode()[-2000:]}")
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)  # a real crash: no handler, no flush, mid-step or mid-write
    finally:
        proc.wait(30)
    assert proc.returncode == -signal.SIGKILL
    res = subprocess.run(cmd + ["--resume"], env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert _steps(cut.path) == _steps(full.path)  # every step's metrics, kl included
    with RunStore(full.path / "run.sqlite") as a, RunStore(cut.path / "run.sqlite") as b:
        def evals(store):
            return [(st, n, {k: v for k, v in m.items() if not k.startswith("latency")}) for st, n, m in store.evals()]

        assert evals(a) == evals(b)
        assert b.info()["resumed_from"] == 3
    from posttrain.models.io import load_model

    m1, _ = load_model(full.path / "checkpoints" / "step_000006")
    m2, _ = load_model(cut.path / "checkpoints" / "step_000006")
    for (k, x), (_, y) in zip(m1.state_dict().items(), m2.state_dict().items()):
        assert torch.equal(x, y), k


@pytest.mark.slow
def test_resume_with_kl_keeps_the_initial_reference(tiny_model_dir, tmp_path):
    extra = ("train.steps=6", "train.checkpoint_every=3", "eval.every=0", "rl.lr=1e-2", "rl.kl_beta=0.1")
    full = _cfg(tiny_model_dir, tmp_path, "kl_full", *extra)
    a = Trainer(full)
    a.run()
    a.close()
    cut = _cfg(tiny_model_dir, tmp_path, "kl_cut", *extra)
    b = Trainer(cut)
    b.run(stop_at=4)
    b.close()
    c = Trainer(cut, resume=True)
    assert c.learner.ref_model is not None  # the reference must be the initial policy, not the checkpoint
    from posttrain.models.io import load_model

    init, _ = load_model(tiny_model_dir)
    for (k, x), (_, y) in zip(init.state_dict().items(), c.learner.ref_model.state_dict().items()):
        assert torch.equal(x, y), k
    c.run()
    c.close()
    s1, s2 = _steps(full.path), _steps(cut.path)
    assert s1 == s2 and all(m["kl"] > 0 for _, m in s1[1:])
