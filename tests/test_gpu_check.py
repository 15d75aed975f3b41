"""scripts/gpu_check.sh runs on a machine without a GPU far enough to print its one JSON line: the figures script's
CPU smoke (the same code as the GPU run, at a tiny scale) and every GPU key marked unmeasured with the reason."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
KEYS = ("gpu", "vllm_vs_local_tok_s", "learner_mfu", "weight_sync_s", "colocated_grpo_logprob_mismatch")


def _run(tmp_path: Path, extra_env: dict[str, str]) -> tuple[subprocess.CompletedProcess, dict]:
    env = dict(os.environ, GPU_CHECK_ONLY="scale", GPU_SCALE_ARGS="--grpo-steps 1",
               GPU_CHECK_LOG=str(tmp_path / "gpu_check.log"), OMP_NUM_THREADS="1", **extra_env)
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_check.sh")], env=env, capture_output=True, text=True,
                          timeout=600)
    return proc, json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_the_gpu_check_prints_every_key_unmeasured_with_its_reason_on_a_cpu(tmp_path):
    proc, line = _run(tmp_path, {})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert all(line[k] is None for k in KEYS)
    assert set(line["unmeasured"]) == set(KEYS)
    assert all("no CUDA GPU visible" in why for why in line["unmeasured"].values())
    smoke = line["smoke"]  # the figures code ran end to end at a tiny scale
    assert smoke["local_tok_s"] > 0 and smoke["learner_tokens_per_s"] > 0 and smoke["vocab"] == 512
    assert smoke["colocated_grpo_steps"] == 1 and smoke["colocated_grpo_logprob_mismatch"] is not None
    assert any(n.startswith("vllm: ") for n in smoke["notes"])  # vLLM absent here: said, not invented
    assert (tmp_path / "gpu_check.log").read_text().count("{") >= 1


def test_a_broken_figures_script_still_gives_one_json_line_saying_why(tmp_path):
    """Planted failure: the figures script cannot import (a broken PYTHONPATH entry shadows torch)."""
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "torch.py").write_text("raise ImportError('planted: torch is broken')\n")
    proc, line = _run(tmp_path, {"PYTHONPATH": f"{shadow}:{os.environ.get('PYTHONPATH', '')}"})
    assert all(line[k] is None for k in KEYS)
    assert all("gpu_scale.py failed" in why and "planted" in why for why in line["unmeasured"].values())
