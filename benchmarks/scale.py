"""The scale path's figures (issue 17): memory-bounded logprobs, data parallelism, LoRA, Qwen3 parity, and,
where a CUDA GPU exists, vLLM rollouts, learner MFU and weight sync.

CPU, always (each measured against its baseline in the same run):
- `logprob_peak_ratio`: peak resident memory of the learner's chunked logprobs (`rl.logprob_chunk`, default
  256 positions) over the unchunked path (full [T, V] logits), forward and backward, T = 4096, V = 151,936
  (a 1-layer, 64-wide model, so the vocabulary dominates as it does at scale). Each side runs in a fresh
  process and reports its peak RSS (`ru_maxrss`) minus its RSS just before the computation: allocator
  and model overheads cancel, what is left is the logprobs' own working set. Goal <= 0.125.
- `ddp_max_grad_diff` (and `fsdp_max_grad_diff`): 2 gloo processes under torchrun vs one process, tiny
  model, 2 updates (tests/_harness/equivalence.py). Goal <= 1e-6. `ddp_train_max_weight_diff` (and
  `fsdp_...`): `posttrain train`'s loop itself on 2 ranks, each rolling out its share, against one process
  replaying the same batches (3 updates at lr 1e-4).
- `dp_train_time_ratio` (no goal; what torchrun buys on this machine): the built-in addition recipe for
  `--dp-steps` steps on 2 torchrun ranks of 1 thread each over 1 process of 2 threads (the same cores),
  training time only, with both held-out greedy gains (`dp_gain_one_process`, `dp_gain_two_ranks`).
- `lora_gain_ratio`: held-out greedy-accuracy gain on the reporting half (the selection half's beside it; the
  learning rate was chosen on the selection half) of a LoRA run (`--lora-r` 8, `--lora-alpha` 16, every
  projection; lr `--lora-lr`, above the full run's as is usual for LoRA) over the gain of full fine-tuning at equal steps
  (`--steps`, default the recipe's 300) on the built-in addition recipe (examples/addition.toml), each from
  the same base model and seed, in a fresh process, for every seed of `--seeds`; the key is the median of
  the seeds' ratios (each seed's, and the lowest, beside it); trainable parameters of both are reported.
  Goal >= 0.8.
- `qwen3_max_logit_diff`: the native Qwen3 against transformers' Qwen3ForCausalLM on a locally built random
  checkpoint (q/k norms randomised). Goal <= 1e-4.
GPU (`--gpu`, only where torch sees CUDA; otherwise absent, and `note` says why):
- `vllm_vs_local_tok_s`: GRPO-shaped rollouts (64 prompts x 8 samples x 128 tokens) tokens/s with vLLM over
  the local engine on the same GPU, a 0.5B-shaped (Qwen2.5-0.5B) random model. Goal >= 10.
- `learner_mfu`: bf16 learner update model-FLOPs (6 N tokens + attention) per second over the GPU's
  dense bf16 peak (a table by device name). Goal >= 0.3.
- `weight_sync_s`: `VLLMEngine.load_weights` of the 0.5B state dict. Goal <= 1.

Prints one line per measurement and, last, one JSON object.

    nice -n 10 python benchmarks/scale.py [--steps 300] [--seeds 0 1 2] [--gpu]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}

PEAK_CHILD = r"""
import json, resource, sys, time
import torch
torch.set_num_threads(1)
from posttrain.models import CausalLM, ModelConfig
from posttrain.models.logprobs import chunked_logprobs, token_logprobs
mode, t, v = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
cfg = ModelConfig(vocab_size=v, hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=4,
                  num_key_value_heads=4)
model = CausalLM(cfg)
model.init_weights(torch.Generator().manual_seed(0))
ids = torch.randint(0, v, (1, t), generator=torch.Generator().manual_seed(1))
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()
before = rss()
start = time.perf_counter()
if mode == "chunked":
    logp, _ = chunked_logprobs(model, ids, 1.0)
else:
    logp = token_logprobs(model(ids)[:, :-1], ids[:, 1:])
logp.sum().backward()
seconds = time.perf_counter() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"peak_delta_bytes": peak - before, "seconds": seconds, "logp_sum": float(logp.sum())}))
"""

ARM_CHILD = r"""
import json, sys, time
from posttrain.config import load_config
from posttrain.rl.trainer import Trainer
cfg = load_config(sys.argv[1], [f"run_dir='{sys.argv[2]}'", f"train.steps={sys.argv[3]}", "eval.every=0",
                                "train.checkpoint_every=0", "tensorboard=false", *sys.argv[4:]])
from posttrain.eval.accuracy import evaluate_accuracy
start = time.perf_counter()
trainer = Trainer(cfg, overwrite=True)

def reporting():  # greedy on the reporting half: never what a checkpoint or a learning rate was chosen on
    if not trainer.lead:
        return None
    return evaluate_accuracy(trainer.engine, trainer.reporting, trainer.verifier, trainer.params.max_tokens,
                             sandboxes=trainer.parts.sandboxes).accuracy

before = trainer.evaluate().get("greedy_accuracy")  # under torchrun every rank calls it (the replica check)
before_r = reporting()
train_start = time.perf_counter()
for _ in range(cfg.train.steps):
    trainer.train_step()
train_s = time.perf_counter() - train_start
after = trainer.evaluate().get("greedy_accuracy")
after_r = reporting()
trainable = sum(p.numel() for p in trainer.learner.params)
total = sum(p.numel() for p in trainer.model.parameters())
lead = trainer.lead
trainer.close()
if lead:
    print(json.dumps({"before": before, "after": after, "gain": after - before, "before_reporting": before_r,
                      "after_reporting": after_r, "gain_reporting": after_r - before_r,
                      "n_reporting": len(trainer.reporting), "trainable_params": trainable,
                      "total_params": total, "seconds": time.perf_counter() - start, "train_s": train_s}))
"""


def _child(code: str, *args: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", code, *args], env=ENV, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"child failed: {proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def logprob_peak(t: int, v: int) -> dict:
    full = _child(PEAK_CHILD, "full", str(t), str(v))
    chunked = _child(PEAK_CHILD, "chunked", str(t), str(v))
    ratio = chunked["peak_delta_bytes"] / full["peak_delta_bytes"]
    print(f"logprobs T={t} V={v}: unchunked peak +{full['peak_delta_bytes'] / 2**20:.0f} MiB ({full['seconds']:.1f} s), "
          f"chunked +{chunked['peak_delta_bytes'] / 2**20:.0f} MiB ({chunked['seconds']:.1f} s): ratio {ratio:.4f}")
    return {"logprob_peak_ratio": round(ratio, 4), "logprob_peak_full_mib": round(full["peak_delta_bytes"] / 2**20, 1),
            "logprob_peak_chunked_mib": round(chunked["peak_delta_bytes"] / 2**20, 1),
            "logprob_sum_diff": abs(full["logp_sum"] - chunked["logp_sum"])}


TINY_RUN = """name = "dp"
run_dir = "{runs}"
tensorboard = false
[model]
path = "{model}"
[tasks]
digits = 1
[sampling]
n = 4
max_tokens = 4
[reward]
verifier = "numeric"
tolerance = 4.0
[train]
steps = 3
prompts_per_step = 4
checkpoint_every = 0
[eval]
size = 20
every = 2
[rl]
lr = 0.0001
data_parallel = "{strategy}"
"""


def data_parallel() -> dict:
    sys.path.insert(0, str(ROOT / "src"))
    sys.path.insert(0, str(ROOT / "tests"))
    from _harness.equivalence import run_equivalence, run_train_equivalence
    from tiny_models import make_tiny_model

    out = {}
    for strategy in ("ddp", "fsdp"):
        r = run_equivalence(strategy, nproc=2, steps=2)
        print(f"{strategy}: 2 gloo ranks vs 1 process: max |grad diff| {r['max_grad_diff']:.2e}, "
              f"max |weight diff| {r['max_weight_diff']:.2e}")
        out[f"{strategy}_max_grad_diff"] = r["max_grad_diff"]
        out[f"{strategy}_max_weight_diff"] = r["max_weight_diff"]
        with tempfile.TemporaryDirectory() as tmp:
            model = make_tiny_model(Path(tmp) / "model")
            config = Path(tmp) / "run.toml"
            config.write_text(TINY_RUN.format(runs=Path(tmp) / "runs", model=model, strategy=strategy))
            t = run_train_equivalence(config, nproc=2)
        print(f"{strategy}: posttrain train's loop on 2 ranks ({t['updates']} updates, each rank rolling out its "
              f"share: {len(t['rank_tasks'][0])} / {len(t['rank_tasks'][1])} groups) vs 1 process on the same batches: "
              f"max |weight diff| {t['max_weight_diff']:.2e} (weights moved {t['moved']:.2e}), "
              f"ranks' weights differ by {t['replica_max_diff']:.1e}")
        out[f"{strategy}_train_max_weight_diff"] = t["max_weight_diff"]
        out[f"{strategy}_train_replica_diff"] = t["replica_max_diff"]
    return out


def data_parallel_training(steps: int, seed: int) -> dict:
    """The built-in addition recipe at equal steps: one process with both cores' threads against `posttrain
    train`'s loop on 2 torchrun ranks of one thread each (the same cores), each from the same base and seed:
    training wall time (evaluations excluded on both sides) and held-out greedy gains."""
    config = str(ROOT / "examples" / "addition.toml")
    extra = [f"seed={seed}"]
    with tempfile.TemporaryDirectory() as runs:
        env = {**ENV, "OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "2"}
        proc = subprocess.run([sys.executable, "-c", ARM_CHILD, config, runs, str(steps), *extra], env=env,
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"child failed: {proc.stderr[-3000:]}")
        one = json.loads(proc.stdout.strip().splitlines()[-1])
    with tempfile.TemporaryDirectory() as runs:
        script = Path(runs) / "arm.py"
        script.write_text(ARM_CHILD)
        proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                               str(script), config, runs, str(steps), *extra], env=ENV, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"torchrun failed: {proc.stderr[-3000:]}")
        ranks = json.loads([line for line in proc.stdout.splitlines() if line.startswith("{")][-1])
    for name, a in (("1 process, 2 threads", one), ("2 ranks, 1 thread each", ranks)):
        print(f"addition seed {seed}, {name}: held-out greedy {a['before']:.3f} -> {a['after']:.3f} "
              f"(gain {a['gain']:+.3f}), {steps} steps in {a['train_s']:.1f} s ({a['train_s'] / steps:.3f} s/step)",
              flush=True)
    ratio = ranks["train_s"] / one["train_s"]
    print(f"2 ranks / 1 process training time at equal steps: {ratio:.3f}")
    return {"dp_train_time_ratio": round(ratio, 3), "dp_gain_one_process": round(one["gain"], 4),
            "dp_gain_two_ranks": round(ranks["gain"], 4), "dp_steps": steps, "dp_seed": seed,
            "dp_step_s_one_process": round(one["train_s"] / steps, 4),
            "dp_step_s_two_ranks": round(ranks["train_s"] / steps, 4)}


def lora_gain(steps: int, lora_lr: float, seeds: list[int], r: int = 8, alpha: float = 16.0) -> dict:
    import statistics

    config = str(ROOT / "examples" / "addition.toml")
    rows = []
    for seed in seeds:
        arms = {}
        for arm, extra in (("full", []), ("lora", [f"rl.lora={{r={r}, alpha={alpha}}}", f"rl.lr={lora_lr}"])):
            with tempfile.TemporaryDirectory() as runs:
                arms[arm] = _child(ARM_CHILD, config, runs, str(steps), f"seed={seed}", *extra)
            a = arms[arm]
            print(f"seed {seed} {arm}: reporting half ({a['n_reporting']}) greedy {a['before_reporting']:.3f} -> "
                  f"{a['after_reporting']:.3f} (gain {a['gain_reporting']:+.3f}); selection half {a['before']:.3f} -> "
                  f"{a['after']:.3f} (gain {a['gain']:+.3f}); {steps} steps, {a['trainable_params']:,} of "
                  f"{a['total_params']:,} parameters trained, {a['seconds']:.0f} s", flush=True)
        full, lora = arms["full"], arms["lora"]
        ratio = lora["gain_reporting"] / full["gain_reporting"] if full["gain_reporting"] > 0 else float("nan")
        rows.append({"seed": seed, "ratio": round(ratio, 3), "lora_gain": round(lora["gain_reporting"], 4),
                     "full_gain": round(full["gain_reporting"], 4), "lora_gain_selection": round(lora["gain"], 4),
                     "full_gain_selection": round(full["gain"], 4)})
        trainable = (lora["trainable_params"], full["trainable_params"])
    ratios = [row["ratio"] for row in rows]
    return {"lora_gain_ratio": round(statistics.median(ratios), 3), "lora_gain_ratio_min": min(ratios),
            "lora_seeds": rows, "lora_trainable_params": trainable[0], "full_trainable_params": trainable[1],
            "lora_steps": steps, "lora_lr": lora_lr, "lora_r": r, "lora_alpha": alpha}


def qwen3_parity() -> dict:
    sys.path.insert(0, str(ROOT / "src"))
    import torch
    import transformers

    from posttrain.models import char_tokenizer, load_model

    cfg = transformers.Qwen3Config(vocab_size=char_tokenizer().vocab_size, hidden_size=128, intermediate_size=256,
                                   num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, head_dim=48,
                                   max_position_embeddings=256, tie_word_embeddings=False)
    torch.manual_seed(0)
    hf = transformers.Qwen3ForCausalLM(cfg).eval()
    with torch.no_grad():
        for layer in hf.model.layers:
            layer.self_attn.q_norm.weight.uniform_(0.5, 1.5)
            layer.self_attn.k_norm.weight.uniform_(0.5, 1.5)
    with tempfile.TemporaryDirectory() as d:
        hf.save_pretrained(d)
        char_tokenizer().save(Path(d))
        native, _ = load_model(d)
    ids = torch.randint(0, cfg.vocab_size, (4, 64), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        diff = float((native(ids) - hf(ids).logits).abs().max())
    print(f"qwen3: native vs transformers Qwen3ForCausalLM, max |logit diff| {diff:.2e}")
    return {"qwen3_max_logit_diff": diff}


def load() -> float:
    return round(os.getloadavg()[0], 2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=300, help="training steps per arm of the LoRA comparison (the recipe's)")
    ap.add_argument("--lora-lr", type=float, default=3e-3)
    ap.add_argument("--lora-r", type=int, default=8)
    ap.add_argument("--lora-alpha", type=float, default=16.0)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="seeds of the LoRA comparison")
    ap.add_argument("--T", type=int, default=4096)
    ap.add_argument("--V", type=int, default=151936)
    ap.add_argument("--dp-steps", type=int, default=300, help="steps per arm of the 1-process vs 2-rank training run")
    ap.add_argument("--dp-seed", type=int, default=0)
    ap.add_argument("--skip", nargs="*", default=[], choices=["peak", "dp", "dp_train", "lora", "qwen3"])
    ap.add_argument("--gpu", action="store_true", help="also the GPU figures (needs CUDA; vLLM for two of them)")
    args = ap.parse_args()
    out: dict = {"cpus": os.cpu_count(), "load_avg_1m_start": load()}
    start = time.perf_counter()
    if "qwen3" not in args.skip:
        out.update(qwen3_parity())
    if "dp" not in args.skip:
        out.update(data_parallel())
    if "dp_train" not in args.skip:
        out.update(data_parallel_training(args.dp_steps, args.dp_seed))
    if "peak" not in args.skip:
        out.update(logprob_peak(args.T, args.V))
    if "lora" not in args.skip:
        out.update(lora_gain(args.steps, args.lora_lr, args.seeds, args.lora_r, args.lora_alpha))
    notes = []
    import torch

    if args.gpu and torch.cuda.is_available():
        from gpu_scale import gpu_figures  # benchmarks/gpu_scale.py: the GPU part, one short script

        out.update(gpu_figures(notes))
    else:
        notes.append("GPU keys (vllm_vs_local_tok_s, learner_mfu, weight_sync_s) absent: "
                     + ("no CUDA GPU visible on this machine" if not torch.cuda.is_available() else "--gpu not given"))
    out.update(load_avg_1m_end=load(), seconds=round(time.perf_counter() - start, 1), note="; ".join(notes))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
