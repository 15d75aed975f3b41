"""``benchmarks/vs_trl.py``'s evaluation grid: both sides are evaluated after the same steps, and the
evaluations' time is off both clocks. TRL's side is driven through the benchmark's real
`TrainerCallback` by transformers' own `TrainerState` (transformers is a dev dependency, TRL is not), and
posttrain's side through the benchmark's loop over a stand-in trainer."""

from pathlib import Path

import pytest
import torch

from benchmark_module import load_benchmark

ROOT = Path(__file__).resolve().parents[1]


def _bench():
    return load_benchmark("vs_trl")


class FakeClock:
    """Training steps cost 1 s, evaluations 10 s: whatever leaks into a clock shows."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def _grid(bench, steps, every, clock, seen):
    def evaluate(step):
        seen.append(step)
        clock.now += 10.0
        torch.rand(3)  # evaluation drawing from the global RNG must not shift training's draws
        return step / 100

    return bench.EvalGrid(steps, every, evaluate, base_accuracy=0.0, clock=clock)


def test_eval_steps_are_every_k_and_the_last():
    bench = _bench()
    assert bench.eval_steps(4, 2) == [2, 4]
    assert bench.eval_steps(5, 2) == [2, 4, 5]
    assert bench.eval_steps(300, 25)[:2] == [25, 50] and bench.eval_steps(300, 25)[-1] == 300
    assert bench.eval_steps(3, 0) == [3]


@pytest.mark.slow
def test_trl_callback_and_posttrain_loop_evaluate_at_the_same_steps_with_evaluation_off_the_clock():
    from types import SimpleNamespace

    from transformers import TrainerControl, TrainerState

    bench = _bench()
    steps, every = 4, 2

    clock_trl, seen_trl = FakeClock(), []
    trl = _grid(bench, steps, every, clock_trl, seen_trl)
    callback = bench.trl_grid_callback(trl)
    args = SimpleNamespace()  # the callback reads only `state`; TrainingArguments would need accelerate
    state, control = TrainerState(), TrainerControl()
    callback.on_train_begin(args, state, control)
    for step in range(1, steps + 1):
        clock_trl.now += 1.0  # one training step
        state.global_step = step
        callback.on_step_end(args, state, control)

    class StandIn:
        step = 0

        def train_step(self):
            self.step += 1
            clock_pt.now += 1.0

    clock_pt, seen_pt = FakeClock(), []
    pt = _grid(bench, steps, every, clock_pt, seen_pt)
    torch.manual_seed(0)
    bench.run_posttrain_grid(StandIn(), pt)
    after = torch.rand(1)  # the evaluations drew from the global RNG; restored, this is the seed's first draw
    assert seen_trl == seen_pt == [0, 2, 4]
    assert [(p.step, p.seconds) for p in trl.curve] == [(p.step, p.seconds) for p in pt.curve] == [(0, 0.0), (2, 2.0), (4, 4.0)]
    assert trl.train_seconds == pt.train_seconds == 4.0 and trl.eval_seconds == pt.eval_seconds == 30.0
    torch.manual_seed(0)
    assert torch.equal(after, torch.rand(1))
    assert pt.reached(0.02).step == 2 and pt.reached(0.05) is None
