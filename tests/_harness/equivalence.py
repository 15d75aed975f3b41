"""The data-parallel check: N ranks under torchrun against one process, on a tiny seeded model.

Covers: `run_equivalence(strategy, nproc, steps)`, which launches `_equivalence.py` (beside this file)
under `torch.distributed.run` (gloo on CPU) and returns its record: the largest |gradient| and |weight|
difference between the ranks' updates and one process's over the same batches; `run_train_equivalence`,
the same for the training loop itself (`posttrain train`'s `Trainer` under torchrun: each rank's share of
the rollouts, then the update over the ranks; `_train_equivalence.py`). The test suite and `benchmarks/scale.py`
(`ddp_max_grad_diff`, `ddp_train_max_weight_diff`) call them.
Does not cover: speed (the model is tiny on purpose).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import posttrain

HERE = Path(__file__).resolve().parent


def run_equivalence(strategy: str = "ddp", nproc: int = 2, steps: int = 2, timeout_s: float = 300.0) -> dict:
    """{'max_grad_diff', 'max_weight_diff', 'steps', 'world', 'strategy', 'metrics_diff'} from a torchrun launch."""
    return launch(HERE / "_equivalence.py", ["--strategy", strategy, "--steps", str(steps)], nproc, timeout_s)


def run_train_equivalence(config: Path, nproc: int = 2, timeout_s: float = 300.0) -> dict:
    """The training loop itself under torchrun (`Trainer` on the run `config` describes) against one process
    replaying the same batches: {'max_weight_diff', 'replica_max_diff', 'moved', 'updates', 'steps', 'world',
    'strategy', 'rank_tasks' (what each rank rolled out), 'sampled_tasks' (every group, as stored)}."""
    return launch(HERE / "_train_equivalence.py", ["--config", str(config)], nproc, timeout_s)


def launch(script: Path, args: list[str], nproc: int = 2, timeout_s: float = 300.0) -> dict:
    """`python -m torch.distributed.run --standalone --nproc_per_node N SCRIPT ARGS --out JSON` (one torch
    thread per rank, the imported posttrain's src/ on the path) -> the JSON rank 0 wrote; a failed launch raises
    with the ranks' output."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
               str(script), *args, "--out", str(out)]
        proc = subprocess.run(cmd, env=rank_env(), capture_output=True, text=True, timeout=timeout_s)
        if proc.returncode != 0 or not out.exists():
            raise RuntimeError(f"torchrun failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
        return json.loads(out.read_text())


def rank_env() -> dict[str, str]:
    """The environment of a torchrun launch from here: one torch thread per rank, the imported posttrain's src/
    first (so the ranks run the code under test, not another install)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    src = str(Path(posttrain.__file__).resolve().parents[1])  # the src/ posttrain was imported from
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH", "")) if p)
    return env
