"""The data-parallel check: N ranks under torchrun against one process, on a tiny seeded model.

Covers: `run_equivalence(strategy, nproc, steps)`, which launches `posttrain.distributed._equivalence`
under `torch.distributed.run` (gloo on CPU) and returns its record: the largest |gradient| and |weight|
difference between the ranks' updates and one process's over the same batches. The test suite and
`benchmarks/scale.py` (`ddp_max_grad_diff`) both call it.
Does not cover: speed (the model is tiny on purpose).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path


def run_equivalence(strategy: str = "ddp", nproc: int = 2, steps: int = 2, timeout_s: float = 300.0) -> dict:
    """{'max_grad_diff', 'max_weight_diff', 'steps', 'world', 'strategy', 'metrics_diff'} from a torchrun launch."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
        src = str(Path(__file__).resolve().parents[2])  # the src/ this package was imported from
        env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH", "")) if p)
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
               "-m", "posttrain.distributed._equivalence", "--strategy", strategy, "--steps", str(steps), "--out", str(out)]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout_s)
        if proc.returncode != 0 or not out.exists():
            raise RuntimeError(f"torchrun failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
        return json.loads(out.read_text())
