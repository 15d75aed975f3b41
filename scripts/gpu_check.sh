#!/usr/bin/env bash
# The GPU check of issue 37, ready to run on one H100/H200-class GPU in <= 10 minutes:
#   1. the GPU smoke tests and the real-vLLM tests (tests/test_gpu_smoke.py, tests/engine/test_vllm_engine.py);
#   2. the CPU distributed tests where CUDA is visible (gloo must be chosen from the run, not the machine);
#   3. benchmarks/gpu_scale.py: a byte-level BPE built here, a 0.5B-shaped model, vLLM vs the local engine,
#      learner MFU, weight sync, a 20-step colocated GRPO run with its logprob mismatch.
# The last line printed is one JSON object: the figures, each test step's outcome under "checks", and every
# key not measured with its reason under "unmeasured". Without a GPU it still runs (the tests skip what needs
# one; gpu_scale.py runs its CPU smoke and marks every GPU key unmeasured).
# Needs: pip install -e ".[dev,vllm]". Environment: GPU_CHECK_ONLY=scale runs step 3 alone; GPU_SCALE_ARGS
# passes arguments to gpu_scale.py (e.g. "--grpo-steps 5"). Output also goes to $GPU_CHECK_LOG.
set -u
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
LOG="${GPU_CHECK_LOG:-benchmarks/results/gpu_check_$(date -u +%Y-%m-%d).log}"
mkdir -p "$(dirname "$LOG")"
CHECKS="$(mktemp)"
trap 'rm -f "$CHECKS"' EXIT
echo "{}" > "$CHECKS"

record() {  # record NAME RC: the step's outcome into the checks JSON
    python - "$CHECKS" "$1" "$2" <<'PY'
import json, sys
path, name, rc = sys.argv[1], sys.argv[2], int(sys.argv[3])
checks = json.load(open(path))
checks[name] = "passed" if rc == 0 else ("timed out" if rc == 124 else f"failed (exit {rc})")
json.dump(checks, open(path, "w"))
PY
}

step() {  # step NAME SECONDS COMMAND...: run it under a time limit, log it, record its outcome
    local name="$1" limit="$2"
    shift 2
    echo "== $name: $*" | tee -a "$LOG"
    timeout "$limit" "$@" 2>&1 | tail -n 25 | tee -a "$LOG"
    record "$name" "${PIPESTATUS[0]}"
}

{
    echo "== gpu_check $(date -u +%FT%TZ) on $(hostname)"
    nvidia-smi -L 2>/dev/null || echo "nvidia-smi: none"
    python -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"
    python -c "import vllm; print('vllm', vllm.__version__)" 2>/dev/null || echo "vllm: not installed"
} 2>&1 | tee -a "$LOG"

if [ "${GPU_CHECK_ONLY:-}" != "scale" ]; then
    step gpu_tests 120 python -m pytest -q -rs tests/test_gpu_smoke.py tests/engine/test_vllm_engine.py
    step cpu_distributed_with_cuda_visible 150 python -m pytest -q tests/distributed/test_cuda_visible.py \
        tests/distributed/test_data_parallel.py
fi
OUT="$(mktemp)"
# shellcheck disable=SC2086
timeout 330 python benchmarks/gpu_scale.py --checks "$CHECKS" ${GPU_SCALE_ARGS:-} > "$OUT" 2>&1
RC=$?
tee -a "$LOG" < "$OUT" | tail -n 30 >&2
LAST="$(tail -n 1 "$OUT")"
if [ "$RC" -eq 0 ] && [ "${LAST#\{}" != "$LAST" ]; then
    echo "$LAST"
else  # the figures script itself failed: still one JSON line, every key unmeasured, with why
    python - "$CHECKS" "$RC" "$OUT" <<'PY'
import json, sys
checks, rc, out = json.load(open(sys.argv[1])), sys.argv[2], open(sys.argv[3]).read()[-600:]
why = f"benchmarks/gpu_scale.py failed (exit {rc}): {out}"
keys = ("gpu", "vllm_vs_local_tok_s", "learner_mfu", "weight_sync_s", "colocated_grpo_logprob_mismatch")
print(json.dumps({**{k: None for k in keys}, "checks": checks, "unmeasured": {k: why for k in keys}}))
PY
fi
rm -f "$OUT"
