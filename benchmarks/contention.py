"""Training beside another busy process: the addition recipe's step time, quiet and with one spinning process,
under libgomp's default waiting and under `OMP_WAIT_POLICY=PASSIVE` (set before torch loads, so each variant runs
in its own process). Every variant: the same recipe, built-in base, 3 warm-up steps, then `--steps` timed
`train_step` calls (wall clock). Prints each variant and, last, one JSON object with ms/step per variant and the
slowdowns against the quiet default.

    python benchmarks/contention.py --steps 15
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CHILD = r"""
import sys, time
from posttrain.config import BaseModelConfig, load_config
from posttrain.recipes.builtin import ensure_base
from posttrain.rl.trainer import Trainer
model = str(ensure_base(BaseModelConfig()).path)
cfg = load_config(sys.argv[1], [f"model.path='{model}'", f"run_dir='{sys.argv[2]}'", "train.steps=1000",
                                "train.checkpoint_every=0", "tensorboard=false", "eval.every=0"])
trainer = Trainer(cfg, overwrite=True)
for _ in range(3):
    trainer.train_step()
t = time.perf_counter()
for _ in range(int(sys.argv[3])):
    trainer.train_step()
print((time.perf_counter() - t) / int(sys.argv[3]) * 1e3)
trainer.close()
"""


def step_ms(passive: bool, steps: int) -> float:
    env = {**os.environ, **({"OMP_WAIT_POLICY": "PASSIVE"} if passive else {})}
    with tempfile.TemporaryDirectory() as d:
        out = subprocess.run([sys.executable, "-c", CHILD, str(REPO / "examples" / "addition.toml"), d, str(steps)],
                             env=env, capture_output=True, text=True, check=True).stdout
    return float(out.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=15)
    args = ap.parse_args()
    load_start = os.getloadavg()
    out: dict[str, float] = {}
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        for passive in (False, True):
            out[f"{'passive' if passive else 'default'}_busy_ms"] = step_ms(passive, args.steps)
    finally:
        busy.kill()
        busy.wait()
    for passive in (False, True):
        out[f"{'passive' if passive else 'default'}_quiet_ms"] = step_ms(passive, args.steps)
    for k, v in out.items():
        print(f"{k}: {v:.1f} ms/step", flush=True)
    quiet = out["default_quiet_ms"]
    print(json.dumps({**{k: round(v, 1) for k, v in out.items()},
                      **{k.replace("_ms", "_vs_quiet_default"): round(v / quiet, 3) for k, v in out.items()},
                      "load_start": load_start, "load_end": os.getloadavg()}))


if __name__ == "__main__":
    main()
