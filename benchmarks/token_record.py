"""What storing per-token records (`step_tokens`, issue 40) costs a training step.

One tiny-model training run, steps in alternating phases with the record off and on (ABAB...A), each step's CPU
seconds (`time.process_time`: this process, all its threads; far less load-dependent than wall time on a shared
machine) and wall seconds, from before the rollout to after the step's rows are committed to the store. The
record reuses the values the update computes anyway, so the only added work is copying them out, decoding each
token's text (once per token id) and writing the blobs.

Figures: ``token_record_cpu_ratio`` (mean CPU per step on / off), ``token_record_cpu_paired_median`` (each
"on" phase against the "off" phases either side of it), ``token_record_wall_ratio``; baseline: the same run's "off"
phases. A step's work varies with how many groups it samples and keeps, so the record's own cost is also measured
where it is spent: ``record_cpu_ms_per_sample`` (the CPU of `RunLog.record_step`, which builds and writes the
records, per stored sample, on and off) and ``update_cpu_ms_per_token`` (the learner's update per trained token, on
and off); ``record_share_of_step``: the added record_step CPU over the mean step CPU. ``update_cpu_ratio``: the
learner's update alone on one fixed batch (64 completions of 12 tokens), record on and off in alternation (ABBA, 30
each, one torch thread), the median CPU on over the median off: the learner-side cost without the run's step-to-step variation.
Run: ``nice -n 10 python benchmarks/token_record.py [--phases 7 --per-phase 3]``. Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path


def update_ab(model_dir: Path, rounds: int = 30) -> dict[str, float]:
    """The learner's update CPU on one fixed batch with the per-token record on and off, alternating."""
    import torch

    from posttrain.config import RLConfig
    from posttrain.models import load_model
    from posttrain.rl.learner import Learner
    from posttrain.rl.train_batch import pack_groups
    from posttrain.types import Completion, FinishReason, Group, Task, Trajectory, Verdict

    model, tok = load_model(model_dir)
    learner = Learner(model, RLConfig(lr=1e-6), max_tokens=12)
    gen = torch.Generator().manual_seed(0)
    groups = []
    for g in range(8):
        task = Task(id=f"t{g}", prompt=f"{g}+{g}=", answer="0")
        trajs = []
        for j in range(8):
            ids = torch.randint(4, tok.vocab_size, (12,), generator=gen).tolist()
            trajs.append(Trajectory.single_turn(task, tok.encode(task.prompt), Completion(ids, "", [-1.0] * 12,
                                                                                           FinishReason.LENGTH),
                                                Verdict(float(j % 2), bool(j % 2))))
        groups.append(Group(task, trajs))
    batch = pack_groups(groups, torch.randn(8, 8), torch.ones(8, 8, dtype=torch.bool), tok.pad_id)
    times: dict[bool, list[float]] = {False: [], True: []}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one thread: idle OpenMP workers spinning on a loaded machine would count as CPU
    learner.update(batch)  # warm-up
    for i in range(2 * rounds):
        learner.record_tokens = bool(i % 2) != bool(i // 2 % 2)  # ABBA: neither side always goes first
        c = time.process_time()
        learner.update(batch)
        times[learner.record_tokens].append(time.process_time() - c)
    torch.set_num_threads(threads)
    off, on = statistics.median(times[False]), statistics.median(times[True])
    return {"update_cpu_s_off": off, "update_cpu_s_on": on, "update_cpu_ratio": on / off}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--phases", type=int, default=7, help="alternating phases, off first and last (odd)")
    ap.add_argument("--per-phase", type=int, default=3, help="training steps per phase")
    ap.add_argument("--update-only", action="store_true", help="only the learner's update on a fixed batch")
    args = ap.parse_args()
    print(f"load average at start: {os.getloadavg()}", flush=True)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from posttrain.config import load_config
    from posttrain.rl.token_record import TokenPieces
    from posttrain.rl.trainer import Trainer
    from tiny_models import make_tiny_model

    root = Path(tempfile.mkdtemp(prefix="token-record-bench-"))
    model = make_tiny_model(root / "tiny")
    upd_ab = update_ab(model)
    print(f"update on a fixed batch: {json.dumps({k: round(v, 4) for k, v in upd_ab.items()})}", flush=True)
    if args.update_only:
        print(f"load average at end: {os.getloadavg()}", flush=True)
        print(json.dumps({k: round(v, 4) for k, v in upd_ab.items()}))
        return
    cfg = load_config(None, [f"model.path='{model}'", f"run_dir='{root}'", "name='tr'", "tasks.digits=1",
                             "sampling.n=8", "sampling.max_tokens=8", f"train.steps={args.phases * args.per_phase + 2}",
                             "train.prompts_per_step=8", "eval.every=0", "train.checkpoint_every=0",
                             "tensorboard=false", "reward.verifier='numeric'", "reward.tolerance=4.0"])
    trainer = Trainer(cfg)
    pieces = trainer.log.pieces
    assert isinstance(pieces, TokenPieces)  # on by default (train.store_samples)
    trainer.run(stop_at=2)  # warm-up
    parts: dict[str, float] = {"record": 0.0, "update": 0.0, "samples": 0.0, "tokens": 0.0}
    record_step, update = trainer.log.record_step, trainer.learner.update

    def timed_record(step, metrics, sampled, *rest):
        c = time.process_time()
        record_step(step, metrics, sampled, *rest)
        parts["record"] += time.process_time() - c
        parts["samples"] += sum(len(g.trajectories) for g in sampled)

    def timed_update(batch):
        c = time.process_time()
        out = update(batch)
        parts["update"] += time.process_time() - c
        parts["tokens"] += float(batch.mask.sum())
        return out

    trainer.log.record_step, trainer.learner.update = timed_record, timed_update  # type: ignore[method-assign]
    per: dict[str, dict[str, float]] = {"off": dict.fromkeys(parts, 0.0), "on": dict.fromkeys(parts, 0.0)}
    cpu: dict[str, list[float]] = {"off": [], "on": []}
    wall: dict[str, list[float]] = {"off": [], "on": []}
    phase_cpu: list[float] = []
    try:
        for phase in range(args.phases):
            mode = "on" if phase % 2 else "off"
            trainer.log.pieces, trainer.learner.record_tokens = (pieces, True) if mode == "on" else (None, False)
            for _ in range(args.per_phase):
                before = dict(parts)
                c0, w0 = time.process_time(), time.perf_counter()
                trainer.train_step()
                cpu[mode].append(time.process_time() - c0)
                wall[mode].append(time.perf_counter() - w0)
                for k in parts:
                    per[mode][k] += parts[k] - before[k]
            phase_cpu.append(statistics.mean(cpu[mode][-args.per_phase:]))
            print(f"phase {phase} ({mode}): CPU {phase_cpu[-1]:.4f} s/step, wall "
                  f"{statistics.mean(wall[mode][-args.per_phase:]):.4f} s/step", flush=True)
        stored = trainer.store.count("step_tokens")
    finally:
        trainer.close()
    rec = {m: 1000 * per[m]["record"] / max(per[m]["samples"], 1) for m in per}
    upd = {m: 1000 * per[m]["update"] / max(per[m]["tokens"], 1) for m in per}
    added = (rec["on"] - rec["off"]) / 1000 * per["on"]["samples"] / max(len(cpu["on"]), 1)
    print(f"record_step CPU per sample (ms): off {rec['off']:.4f}, on {rec['on']:.4f}; update CPU per trained token "
          f"(ms): off {upd['off']:.4f}, on {upd['on']:.4f}", flush=True)
    paired = [phase_cpu[i] / statistics.mean(phase_cpu[i - 1:i + 2:2]) for i in range(1, len(phase_cpu) - 1, 2)]
    print(f"load average at end: {os.getloadavg()}", flush=True)
    print(json.dumps({
        "token_record_cpu_ratio": round(statistics.mean(cpu["on"]) / statistics.mean(cpu["off"]), 4),
        "token_record_cpu_paired_median": round(statistics.median(paired), 4),
        "token_record_wall_ratio": round(statistics.mean(wall["on"]) / statistics.mean(wall["off"]), 4),
        "step_cpu_s_off": round(statistics.mean(cpu["off"]), 4), "step_cpu_s_on": round(statistics.mean(cpu["on"]), 4),
        "off_phase_cpu_spread": round(max(phase_cpu[0::2]) / min(phase_cpu[0::2]) - 1, 4),
        "record_cpu_ms_per_sample_off": round(rec["off"], 4), "record_cpu_ms_per_sample_on": round(rec["on"], 4),
        "update_cpu_ms_per_token_off": round(upd["off"], 4), "update_cpu_ms_per_token_on": round(upd["on"], 4),
        "record_share_of_step": round(added / statistics.mean(cpu["off"] + cpu["on"]), 5),
        "token_steps_stored": stored, **{k: round(v, 4) for k, v in upd_ab.items()}}))


if __name__ == "__main__":
    main()
