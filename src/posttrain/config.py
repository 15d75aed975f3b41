"""Typed, validated run configuration: TOML files plus `--set a.b=c` overrides.

Covers: one pydantic model per component, nested in `RunConfig` (each
section is what `rl/build.py` needs to build its component alone); loading
from TOML; dotted overrides whose values are parsed as TOML literals
(`parse_literal`, the one parser for such values); one-line error messages
naming the field, the value and what is allowed.
Does not cover: what the components do with their settings, and checks that
need a component's code (a verifier kind's arguments, a task file's lines):
configs stay pure, `build` reports those as `ConfigError`s before training.

The defaults are the quickstart: the built-in tiny model learning 2-digit
addition with GRPO on a laptop CPU.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from posttrain.errors import UserError


class ConfigError(UserError, ValueError):
    """A configuration problem, already phrased for a user (one line per problem)."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


_CAD_BASE_DEFAULTS: dict[str, Any] = {"target_low": 0.30, "target_high": 0.60, "batch_size": 32, "eval_every": 25,
                                      "eval_size": 64, "max_steps": 3000, "digits": 1, "kind_floor": 0.15}
FAMILY_BASE_DEFAULTS: dict[str, dict[str, Any]] = {
    # 2-digit products and three-term chains need intermediate results. Written as bare answers, the 0.86M base
    # learnt them slowly (mul: 23% held-out after 1,150 steps, 36.7% at the 3,000-step cap; chain: 14% after
    # 1,544) and RL on mul gained 0-8 points (docs/recipe.md). Written as worked solutions (tasks/arithmetic.py)
    # a mul base is at 47-60% after 300 steps, so both keep the standard 40-65% band.
    "mul": {"worked": True},
    "chain": {"worked": True},
    # multi-hop lookups (agent:lookup): windows of oracle episodes (the instruction, then 160 tokens; whole ones every
    # 10th step), and a band check is a batch of real episodes in the sandbox (64 of them every 25 steps); 2 layers at
    # lr 1e-3 with a copy phase first, as the docs base (format 7)
    "lookup": {"target_low": 0.25, "target_high": 0.55, "batch_size": 64, "eval_every": 25, "eval_size": 64,
               "max_steps": 3000, "digits": 3, "num_layers": 2, "lr": 1e-3},
    # OpenSCAD parts (cad:parts, level = digits): gold programs after a ~300-character prompt (512 positions); a band
    # check is a batch of greedy programs judged by the sandboxed `cad` verifier (64 of them every 25 steps), and each
    # part kind (level 1: a block, a block with a hole) must pass at >= 15% (a base that solved blocks alone left
    # GRPO no holed part to reinforce: issue 42)
    "cad:parts": _CAD_BASE_DEFAULTS,
    # the same parts as generate-observe-correct episodes too (cad_agent:parts, brief form): each step the gold programs
    # of cad:parts plus correction episodes (a first attempt, its render's one line, the gold program); the same band
    # on single-shot programs, so its single-shot figures compare with a cad:parts base's
    "cad_agent:parts": _CAD_BASE_DEFAULTS,
    # long reports (docs:reports, easy level: one-figure lookups in the compact agent form, `digits` = hops): whole
    # oracle episodes (~750 tokens; 8,192 positions, so a 6,000-character report fits the context of the
    # single-turn form), a band check is a batch of real episodes in the sandbox (48 of them every 40 steps); 2 layers
    # at lr 1e-3, where the plain copy an episode's year and figure need forms in a few hundred steps (4 layers, or
    # lr 3e-3, had not formed it by 250 steps of repeat drills: benchmarks/RESULTS.md)
    "docs:reports": {"target_low": 0.20, "target_high": 0.55, "batch_size": 16, "eval_every": 40, "eval_size": 48,
                     "max_steps": 1600, "digits": 1, "num_layers": 2, "lr": 1e-3},
}
"""Per-family defaults of the built-in base model, applied to the fields a config leaves unset."""
_WORKED_FAMILIES = tuple(f for f, d in FAMILY_BASE_DEFAULTS.items() if d.get("worked"))
"""The families written as worked solutions by default (config may not import tasks/, whose
`arithmetic.WORKED_FAMILIES` is the same list; a test keeps them equal)."""


class BaseModelConfig(_Section):
    """The built-in base model: a tiny Llama pre-trained on arithmetic until it is partly competent."""

    hidden_size: int = Field(128, ge=8)
    """Width of the residual stream."""
    num_layers: int = Field(4, ge=1)
    """Decoder layers."""
    intermediate_size: int = Field(384, ge=8)
    """SwiGLU hidden width."""
    num_heads: int = Field(4, ge=1)
    """Attention heads (no grouping: the base model is tiny)."""
    family: Literal["add", "sub", "addsub", "mul", "chain", "code:ops", "code:linear", "lookup",
                    "cad:parts", "cad_agent:parts", "docs:reports"] = "add"
    """The arithmetic family it is pre-trained on (also the quickstart's RL task), a code-writing family
    (`code:ops`, `code:linear`; see docs/code_domain.md), whose difficulty knob is `digits` too, or `lookup`,
    the multi-turn agent domain `agent:lookup` (pre-trained on oracle episodes; its knob is `digits` = hops), or
    `cad:parts`, OpenSCAD programs for generated parts (pre-trained on gold programs; `digits` = the level, 1-3), or
    `cad_agent:parts`, the same plus correction episodes of `cad_agent:parts`'s brief form (a base that can correct), or
    `docs:reports`, questions over long reports in the compact agent form (oracle episodes; `digits` = hops, 1 the
    easy level)."""
    digits: int = Field(2, ge=1, le=9)
    """Operands have up to this many digits (2: a 0.86M model reaches the band in a minute or two on 2 cores)."""
    min_digits: int | None = Field(None, ge=1, le=9)
    """Operand lengths drawn uniformly from min_digits..digits; None: values uniform below 10**digits."""
    worked: bool = False
    """`mul` and `chain` (where it is the default): pre-train on worked solutions (partial products then
    their sum, or a chain's running total; `tasks/arithmetic.py`) instead of the bare result. The RL task
    source must say the same (`tasks.options.worked`, whose default is the same)."""
    held_out_fraction: float = Field(0.15, gt=0.0, lt=1.0)
    """Share of problems never trained on. The split is a threshold on one hash, so an RL task set with
    held_out_fraction <= this one holds out a subset of these: the base model never saw any of them."""
    target_low: float = Field(0.40, ge=0.0, le=1.0)
    """Stop pre-training once held-out greedy accuracy reaches this..."""
    target_high: float = Field(0.65, ge=0.0, le=1.0)
    """...and stay at or below this: a check that jumps over the whole band goes back to the previous check
    and replays its batches checking every step (the band leaves RL room to improve)."""
    max_steps: int = Field(3000, ge=1)
    """Step cap: when the jump in accuracy happens depends on the seed, so stop on accuracy, capped."""
    batch_size: int = Field(256, ge=1)
    """Problems per pre-training step."""
    lr: float = Field(3e-3, gt=0)
    """AdamW learning rate after a 50-step linear warm-up."""
    eval_every: int = Field(10, ge=1)
    """Held-out checks are cheap (one batched greedy decode); frequent ones keep the stop inside the band."""
    eval_size: int = Field(256, ge=16)
    """Held-out problems in each band check."""
    seed: int = 0
    """Seeds the initial weights and the data order: the same seed builds the same model."""
    cache_dir: str | None = None
    """Where built base models are kept (default: $POSTTRAIN_CACHE or ~/.cache/posttrain)."""
    kind_floor: float | None = Field(None, ge=0.0, le=1.0)
    """CAD bases: in band only when every part kind in the band check (its number of features) also passes at least
    this share greedy (`cad:parts` default 0.15); None: the overall rate alone. Only a set value joins the cache key."""
    context: int | None = Field(None, ge=64, le=1_048_576)
    """Positions the built-in model holds (its `max_position_embeddings`); None: the family's own (128, and
    1,024 for `lookup`). Only a set value joins the cache key, so every base built before it keeps its key."""

    @model_validator(mode="after")
    def _band(self) -> "BaseModelConfig":
        for key, value in FAMILY_BASE_DEFAULTS.get(self.family, {}).items():
            if key not in self.model_fields_set:  # a value the user gives wins
                object.__setattr__(self, key, value)
        if self.worked and self.family not in _WORKED_FAMILIES:
            raise ValueError(f"worked solutions exist for the {' and '.join(_WORKED_FAMILIES)} families only, "
                             f"not {self.family!r}")
        if self.family.startswith(("cad:", "cad_agent:")) and self.digits > 3:
            raise ValueError(f"digits is the CAD level for {self.family}: 1, 2 or 3, got {self.digits}")
        if self.target_low > self.target_high:
            raise ValueError(f"target_low ({self.target_low}) must not exceed target_high ({self.target_high})")
        return self


class ModelSection(_Section):
    path: str | None = None
    """An HF-format checkpoint directory (config.json, model.safetensors, tokenizer.json); None = the built-in base."""
    base: BaseModelConfig = BaseModelConfig()
    prompt_format: Literal["auto", "raw", "chat"] = "auto"
    """How a task becomes the model's prompt, in training, evaluation, agents and `posttrain serve` alike. auto:
    the checkpoint's chat template when it ships one (`tokenizer_config.json` / `chat_template.jinja`), else the
    raw prompt (the built-in model); raw: the task's prompt text as it is; chat: the template (an error without one)."""
    system_prompt: str | None = None
    """A system message put before every task's conversation that has none (raw format: a line before the prompt)."""


class TasksConfig(_Section):
    """The training domain's tasks (sugar for one `[[domains]]` entry, used when `domains` is empty)."""

    source: str = "arith:add"
    """`arith:<family>` (add, sub, addsub, mul, chain), `code:<family>` (ops, linear), `rg:<dataset>` (a
    reasoning-gym generator) or a path to a JSONL task file."""
    digits: int = Field(2, ge=1, le=18)
    """Difficulty knob of the arithmetic generators (operands have up to this many digits) and of the code
    generators (constants have up to this many digits, at most 6)."""
    min_digits: int | None = Field(None, ge=1, le=18)
    """Operand lengths drawn uniformly from min_digits..digits (None: values uniform below 10**digits)."""
    held_out_fraction: float = Field(0.15, gt=0.0, lt=1.0)
    on_error: Literal["fail", "skip"] = "fail"
    """What a malformed JSONL line does: fail the load (listing every bad line) or skip it with a warning."""
    options: dict[str, Any] = {}
    """Generator options of `code:<family>` sources (`max_ops`, `operators`, `n_tests`; docs/code_domain.md) and
    `rg:<dataset>` sources (reasoning-gym config keys, `seed`, `size`, `level`, `answer_format`; docs/reasoning_gym.md).
    Unknown keys are an error that lists the allowed ones."""


class RewardConfig(_Section):
    """How responses are judged (with `tasks`, sugar for one `[[domains]]` entry)."""

    verifier: str | dict[str, Any] | None = None
    """None: the domain's own verifier (the one `posttrain eval --suite` uses, e.g. exact match for
    `arith:*`, sandboxed unit tests for `code:*`). Else it overrides it: `exact`, `numeric`, `per_task`
    (each task's `meta.verifier`), any registered kind (`math`, `tags`, ...), or a spec table such as
    `{type = "rubric", parts = [{verifier = "math", weight = 0.8}, ...]}` (docs/rewards.md)."""
    tolerance: float = Field(0.0, ge=0.0)
    """Absolute tolerance of the numeric verifier."""
    extract: Literal["full", "last_number", "boxed", "tag", "auto"] = "full"
    """How exact/numeric read the answer: the whole text, the last number, \\boxed{}, <answer> tags, or auto
    (boxed, else tag, else last number)."""
    timeout_s: float | None = Field(300.0, gt=0.0)
    """Deadline of each response's verification; an item past it is a TIMEOUT verdict (excluded from
    advantages) and costs only itself. None: unbounded."""
    max_response_chars: int | None = Field(None, ge=1)
    """Output-length cap applied before verification: a longer response scores `over_length_score`
    (passed = false, recorded with details) without being verified. None: no cap."""
    over_length_score: float = 0.0
    """The reward of a response over `max_response_chars` (0, or a negative penalty)."""

    @model_validator(mode="after")
    def _spec_shape(self) -> "RewardConfig":
        _check_verifier_shape(self.verifier)
        return self


def _check_verifier_shape(spec: Any) -> None:
    """A verifier spec's shape only (a kind name, or a table with a string `type`); the kind itself is
    resolved, with the list of known kinds on a typo, when the component is built."""
    if spec is None or isinstance(spec, str):
        return
    if not isinstance(spec.get("type"), str):
        raise ValueError(f"a verifier table needs a string 'type' key, got {spec!r}")


class DomainConfig(_Section):
    """One training domain: where its tasks come from, what judges them, and its share of each batch."""

    source: str | list[str]
    """A registered domain spec (`posttrain tasks list`: `arith:add`, `code:ops`, `rg:<dataset>`, `humaneval`)
    or a path to a JSONL task file; or a glob over the registry (`rg:*`, `arith:*`) or a list of specs, which
    expands into one domain each (`tasks/expand.py`)."""
    name: str | None = None
    """How metrics and stored rows name it (default: the source)."""
    verifier: str | dict[str, Any] | None = None
    """None: the domain's own verifier; else a kind or spec table that overrides it (see `reward.verifier`)."""
    weight: float = Field(1.0, gt=0.0)
    """Share of each step's tasks, relative to the other domains' weights."""
    options: dict[str, Any] = {}
    """The source's own options (`digits`, `held_out_fraction`, `on_error`, generator keys; see `tasks`)."""
    max_tokens: int | None = Field(None, ge=1)
    """Completion cap for this domain (None: the domain's default, e.g. 8 for arithmetic)."""
    levels: list[int] | None = None
    """Expand this entry into one domain per difficulty level of the family's knob (`digits` for arith: and code:,
    `level` for rg:, `hops` for agent:), named `<source>@<level>`; `source` may also be a glob (`rg:*`) or a
    list. A level that configures its generator as an earlier level of the same entry does (reasoning-gym levels
    past a generator's last, for one) is left out: no two domains name the same tasks. `posttrain tasks list
    --domains CONFIG` prints the expansion."""
    exclude: list[str] = []
    """Globs of expanded domain names (`rg:knight_swap@level0`) or sources (`rg:composite`) this entry leaves out."""
    band: list[int] | None = None
    """[low, high]: the scheduler (`train.curriculum = "scheduler"`) moves this domain's difficulty knob within
    these levels to keep its pass rate in `[scheduler] band_low..band_high` (None: the level stays)."""

    @model_validator(mode="after")
    def _spec_shape(self) -> "DomainConfig":
        _check_verifier_shape(self.verifier)
        if self.band is not None and (len(self.band) != 2 or self.band[0] > self.band[1]):
            raise ValueError(f"band must be [low, high] with low <= high, got {self.band}")
        return self

    @property
    def label(self) -> str:
        return self.name or (self.source if isinstance(self.source, str) else ",".join(self.source))

    @property
    def expands(self) -> bool:
        """Whether the entry names several domains (a glob, a list of sources, or levels) unless it is named."""
        return self.name is None and (not isinstance(self.source, str) or self.levels is not None
                                      or any(c in self.source for c in "*?["))


class SamplingConfig(_Section):
    n: int = Field(16, ge=1)
    """Group size: samples per task."""
    temperature: float = Field(1.0, ge=0.0)
    """Sampling temperature; the learner scores logprobs at the same temperature."""
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    """Nucleus filtering: must stay 1.0 for training (see `_unfiltered`)."""
    top_k: int = Field(0, ge=0)
    """Top-k filtering: must stay 0 for training (see `_unfiltered`)."""
    max_tokens: int | None = Field(None, ge=1)
    """Completion length cap (None: the domain's default, 8 tokens for arithmetic); the Dr.GRPO
    aggregation divides by it."""

    @model_validator(mode="after")
    def _unfiltered(self) -> "SamplingConfig":
        # With top-p/top-k the engine's behaviour logprobs are those of the filtered distribution while the
        # learner scores the full one: the policy ratio would start below 1 on every token and the clip
        # would act on a gap that is not a policy change. Refused rather than silently biased.
        if self.top_p < 1.0 or self.top_k > 0:
            raise ValueError(
                "top_p < 1 or top_k > 0 would make the sampler's logprobs those of a filtered distribution "
                "while the learner scores the full one (the ratio starts below 1); train with top_p = 1 and "
                "top_k = 0 (evaluation may filter)"
            )
        return self


class LoRAConfig(_Section):
    """Low-rank adapters (peft) on the native model's HF-named projections."""

    r: int = Field(8, ge=1)
    alpha: float = Field(16.0, gt=0.0)
    """Scale: the adapter's update is (alpha / r) * B @ A."""
    dropout: float = Field(0.0, ge=0.0, lt=1.0)
    targets: list[str] = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    """Module names (HF's) that get adapters."""


class RLConfig(_Section):
    advantage: Literal["grpo", "grpo_batch", "dr_grpo"] = "grpo"
    """grpo: (r - mean) / (std + eps), per group; grpo_batch: the group's mean, the batch's std (TRL's
    scale_rewards = "batch"; small within-group differences, such as a process score's, stay small);
    dr_grpo: r - mean (no std normalisation)."""
    std_floor: float = Field(0.0, ge=0.0)
    """grpo only: the group std divided by is at least this. Groups whose rewards differ only by a process
    score keep advantages of their differences / the floor instead of unit size; groups whose outcome varies
    (std above the floor) are plain GRPO. 0: plain GRPO."""
    loss_agg: Literal["token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm"] = "token_mean"
    clip_low: float = Field(0.2, ge=0.0)
    clip_high: float = Field(0.28, ge=0.0)
    """Upper clip of the ratio: above clip_low is DAPO's clip-higher."""
    kl_beta: float = Field(0.0, ge=0.0)
    """Weight of the k3 KL penalty to the initial (reference) policy; 0 disables it and its forward pass."""
    lr: float = Field(3e-4, gt=0.0)
    """AdamW peak learning rate (see lr_schedule). Measured here: 1e-3 collapsed TRL's policy in ~50 steps, and ours
    on subtraction (held-out 33% -> 5% by step 50, docs/recipe.md)."""
    weight_decay: float = Field(0.0, ge=0.0)
    grad_clip: float = Field(1.0, gt=0.0)
    """Global gradient-norm clip."""
    epochs: int = Field(1, ge=1)
    """Passes over each batch of groups; > 1 makes the ratio (and so the clip) matter."""
    minibatches: int = Field(1, ge=1)
    """Optimizer steps per epoch (the batch is split in this many parts)."""
    warmup_steps: int = Field(0, ge=0)
    """Linear learning-rate warm-up, in optimizer steps."""
    lr_schedule: Literal["constant", "cosine", "linear"] = "cosine"
    """After warm-up: constant, or a cosine / linear decay reaching lr x lr_min_ratio at the run's last
    optimizer step (train.steps x epochs x minibatches). Cosine is the default because a constant lr kept
    the late policy moving and held-out accuracy oscillating or falling (docs/recipe.md)."""
    lr_min_ratio: float = Field(0.1, ge=0.0, le=1.0)
    """Where a decaying schedule ends, as a fraction of lr."""
    micro_batches: int = Field(1, ge=1)
    """Gradient accumulation: each minibatch runs in this many forward/backward passes before its one
    optimizer step (the same update within float tolerance, less memory)."""
    importance_sampling: Literal["auto", "on", "off"] = "auto"
    """Truncated importance sampling against the behaviour logprobs. auto: on whenever the sampling engine
    is not the learner's own module (a remote or vLLM engine, another precision); the in-process fp32
    engine shares the learner's weights and needs none."""
    tis_cap: float = Field(2.0, gt=0.0)
    """Truncation of the importance weight pi_old / mu (TIS)."""
    device: str = "cpu"
    """Where the learner's parameters and batches live (`cpu`, `cuda`, `cuda:1`, ...). The local engine shares
    the learner's module, so `engine.device` must name the same device."""
    dtype: Literal["fp32", "bf16"] = "fp32"
    """fp32: exact arithmetic. bf16: forward and backward under bf16 autocast, with fp32 master weights and
    optimizer state (logprobs and the loss are taken in fp32)."""
    logprob_chunk: int = Field(256, ge=1)
    """Target positions per vocabulary projection (models/logprobs.py: `chunked_logprobs`): the full [T, V]
    logits never exist, peak memory O(chunk x V)."""
    activation_checkpointing: bool = False
    """Recompute each decoder layer's activations in backward instead of keeping them (less memory, ~1/3 more compute;
    the attention and MLP halves apart, the MLP 1,024 positions at a time: `models/llama.py`)."""
    packing: bool = False
    """Pack sequences of unequal length into shared rows (per-segment positions and attention) instead of
    padding every row to the longest; needs loss_agg = token_mean."""
    pack_tokens: int | None = Field(None, ge=2)
    """Row width when packing (None: the longest sequence of the batch)."""
    share_prefix: bool = True
    """Run each group's common prefix (the prompt its n completions share) once in the learner's forward and
    backward, as a prefix tree (models/prefix_tree.py), wherever that costs fewer FLOPs than padded rows; the
    same logprobs and gradients within float tolerance. Not with packing. False: every row runs whole."""
    lora: LoRAConfig | None = None
    """Train LoRA adapters (extra `lora`) instead of every weight: only adapter weights move, are synced and saved."""
    data_parallel: Literal["ddp", "fsdp"] = "ddp"
    """Under `torchrun --nproc_per_node N posttrain train ...` (N > 1): every rank rolls out its share of each
    step's groups with its own engine and the update is split over the ranks. ddp: a whole replica per rank
    (gradients all-reduced); fsdp: parameters sharded (FSDP2), each rank's engine sampling from a gathered copy.
    Ignored in one process."""

    @model_validator(mode="after")
    def _packing(self) -> "RLConfig":
        if self.packing and self.loss_agg != "token_mean":
            raise ValueError(f"rl.packing needs loss_agg = 'token_mean' (got {self.loss_agg!r}): the per-sequence "
                             "aggregations count rows, and a packed row holds several sequences")
        return self

    @model_validator(mode="after")
    def _std_floor(self) -> "RLConfig":
        if self.std_floor > 0 and self.advantage != "grpo":
            raise ValueError(f"rl.std_floor applies to advantage = 'grpo' only (got {self.advantage!r}): "
                             "grpo_batch divides by the batch's std and dr_grpo by none")
        return self


class EngineConfig(_Section):
    """The engine that samples rollouts (and the trainer's held-out evaluations)."""

    kind: Literal["local", "vllm"] = "local"
    """local: the in-process engine on the learner's own module (weights shared, no copy); vllm: vLLM in
    this process (extra `vllm`, a GPU), weights loaded after every update. An OpenAI-compatible endpoint
    cannot receive new weights, so it evaluates (`posttrain eval --model URL`) but does not train."""
    max_batch_rows: int = Field(2048, ge=1)
    """Running sequences at most (local)."""
    prefill_chunk: int = Field(512, ge=1)
    """Prompt tokens per sequence per step (local)."""
    max_prefill_tokens: int = Field(4096, ge=1)
    """Prompt tokens per step in all, bounding a step's latency and memory (local)."""
    prefix_cache_tokens: int = Field(32768, ge=0)
    """KV kept across requests for prefix reuse (local; 0 disables)."""
    fused_decode: bool = True
    """The packed one-token decode step and its C kernel where they apply (local; CPU only: unused on another device,
    and `true` set explicitly there is an error)."""
    precision: Literal["fp32", "bf16", "int8"] = "fp32"
    """Weights the local engine samples with. fp32: the learner's module itself. bf16 / int8 (the high-speed
    mode): a copy of it with the decode matmuls' weights (q|k|v, o, gate|up, down, lm_head) rounded to bf16,
    or to int8 with one symmetric scale per output channel; activations, norms, attention and the KV cache
    stay fp32, prefill included. Batch-1 decode on a CPU streams every weight per token, so reading 2x or 4x
    fewer bytes is the speed-up. The rollouts' behaviour logprobs are then the rounded policy's, not the
    learner's: the trainer turns truncated importance sampling on for it (local)."""
    gpu_memory_utilization: float = Field(0.5, gt=0.0, le=1.0)
    """Share of GPU memory vLLM may take (vllm)."""
    device: str = "cpu"
    """Where the engine samples: the local engine shares the learner's module, so this must equal `rl.device`;
    vLLM places itself on the visible GPUs."""
    sleep_level: int = Field(1, ge=0, le=2)
    """vllm on the learner's GPU (`rl.device` cuda): vLLM is built with sleep mode and sleeps at this level around
    every update, waking with the new weights (1: weights offloaded to host memory, KV cache dropped; 2: both
    dropped, the weight sync refills them); 0: never (vLLM on a GPU of its own)."""

    @model_validator(mode="after")
    def _chunks(self) -> "EngineConfig":
        if self.max_prefill_tokens < self.prefill_chunk:
            raise ValueError(f"max_prefill_tokens ({self.max_prefill_tokens}) must be >= prefill_chunk ({self.prefill_chunk})")
        return self

    @model_validator(mode="after")
    def _device_modes(self) -> "EngineConfig":
        # the reduced-precision serving copies decode through the C kernel, which reads host memory
        if self.kind == "local" and not self.device.startswith("cpu") and self.precision != "fp32":
            raise ValueError(f"precision = {self.precision!r} runs on CPU only (the C decode kernel); on "
                             f"device {self.device!r} use precision = \"fp32\"")
        # asked for by name (the default means "where it applies", which is the CPU)
        if self.kind == "local" and not self.device.startswith("cpu") and self.fused_decode \
                and "fused_decode" in self.model_fields_set:
            raise ValueError(f"fused_decode = true is the CPU's C decode kernel; on device {self.device!r} leave it "
                             "unset or false")
        return self


class RolloutConfig(_Section):
    """How rollouts are produced."""

    mode: Literal["sync", "async"] = "sync"
    """sync: rollout, then update, in order. async: producers sample the next steps' groups while the learner
    updates (bounded staleness, docs/async.md)."""
    max_staleness: int = Field(1, ge=0)
    """async: the most policy versions a consumed group may lag the learner (learner version minus the oldest
    version that sampled any of its tokens); older groups are dropped and counted. 0 is the synchronous loop."""
    producers: int = Field(1, ge=1)
    """async: rollout producers, each with its own engine and copy of the weights."""
    producer_kind: Literal["process", "thread"] = "process"
    """async: process (own interpreter and torch threads; weights through shared memory) or thread (in this
    process; for debugging and tests)."""
    producer_threads: int = Field(1, ge=1)
    """async: torch threads of each producer process."""
    buffer_groups: int = Field(64, ge=1)
    """async: groups submitted ahead and not yet consumed, at most (backpressure on the look-ahead)."""
    backend: Literal["local", "ray"] = "local"
    """async: where producers run. local: `producer_kind` on this machine; ray: Ray actors (extra `ray`), each
    building its engine and rollouter from this config, on the cluster at `ray.address` (none: a local one)."""
    ray_worker_cpus: float = Field(1.0, gt=0.0)
    """backend = ray: CPUs each rollout actor reserves."""
    on_new_weights: Literal["continue", "update", "requeue"] = "continue"
    """async: a rollout in flight when new weights arrive finishes under the weights it started with (continue),
    adopts them from its next engine call on, so each turn of an episode keeps its own version (update: threads,
    processes and Ray actors alike), or is discarded, counted and sampled again under the new weights (requeue)."""
    long_lane_producers: int = Field(0, ge=0)
    """async, with `train.curriculum = "scheduler"`: producers that may hold rollouts of long tasks at once (those
    the scheduler expects to take `scheduler.long_factor` times the median domain's seconds); the others always
    take short ones, so long episodes never hold short ones back. 0: no lane (one queue, in order)."""
    step_tokens: int | None = Field(None, ge=1)
    """A step's batch by a token budget instead of a count (None: `train.prompts_per_step` kept groups, as before):
    the batch closes once the kept groups' sampled tokens reach this (the group that crosses it is kept), holding
    `step_min_groups` to `step_max_groups` groups, so a batch of long answers has fewer groups than one of short
    ones. A step's first round draws for `train.prompts_per_step` groups (set it near step_tokens / tokens per
    group); refills draw for the tokens still missing at the step's mean so far, within `train.max_fill_rounds`.
    Tokens, not seconds: a group's sampled tokens are what its update costs and depend on the samples alone, so a
    resumed run and the asynchronous loop at staleness 0 close each batch where the synchronous run does; wall
    time depends on the machine's load (the long lane handles slow rollouts)."""
    step_min_groups: int = Field(1, ge=1)
    """With `step_tokens`: the batch stays open until it holds this many groups, however many tokens they hold."""
    step_max_groups: int = Field(64, ge=1)
    """With `step_tokens`: the batch closes at this many groups, however few tokens they hold."""

    @model_validator(mode="after")
    def _lane_leaves_short_producers(self) -> RolloutConfig:
        if self.long_lane_producers and self.long_lane_producers >= self.producers:
            raise ValueError(f"long_lane_producers = {self.long_lane_producers} must be below producers = "
                             f"{self.producers}: short tasks need producers of their own")
        if self.step_min_groups > self.step_max_groups:
            raise ValueError(f"step_min_groups = {self.step_min_groups} must be at most step_max_groups = "
                             f"{self.step_max_groups}")
        return self

    @model_validator(mode="before")
    @classmethod
    def _moved_to_sandbox(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for old, new in _MOVED_SANDBOX_KEYS.items():
                if old in data:
                    raise ValueError(f"{old} moved to the [sandbox] section: write sandbox.{new} = {data[old]!r}")
            if "kind" in data:
                raise ValueError("kind was removed (nothing read it): a domain's `rollouter` says whether its tasks run "
                                 "single-turn or as agent episodes; delete the key")
        return data


_MOVED_SANDBOX_KEYS = {"sandbox_backend": "backend", "sandbox_workers": "workers", "sandbox_worker_cpus": "worker_cpus",
                       "sandbox_inflight": "inflight"}
"""Keys `[rollout]` held before `[sandbox]` existed: each is a one-line error naming its new place."""


class SandboxConfig(_Section):
    """Where the run's sandboxed work executes: the code verifiers' executions and the agent domains' workspaces
    (tools, terminal tasks), in training and in its evaluations alike (`rl/build.py: build_sandboxes`)."""

    backend: Literal["local", "ray"] = "local"
    """local: a sandbox of each process that verifies (started on first use); ray: `workers` Ray actors, each
    owning a sandbox pool on its node (extra `ray`; the cluster at `ray.address`), a session pinned to the
    worker that opened it (lost, and its episode an env_error, if that worker dies)."""
    workers: int = Field(2, ge=1)
    """backend = ray: sandbox actors each process that builds the domains spreads its executions and sessions over."""
    worker_cpus: float = Field(1.0, ge=0.0)
    """backend = ray: CPUs each sandbox actor reserves (0: placed without reserving any)."""
    inflight: int = Field(16, ge=1)
    """backend = ray: calls (executions, session operations) in flight per sandbox actor, at most (past it callers
    wait)."""
    max_concurrency: int = Field(16, ge=1)
    """Executions at once in one sandbox (the local one, or each Ray actor's pool)."""


class RayConfig(_Section):
    """The Ray cluster every Ray component of the run joins: the rollout actors (`rollout.backend = "ray"`) and the
    sandbox actors (`sandbox.backend = "ray"`) alike. What each places there is in its own section."""

    address: str | None = None
    """`ray.init(address=...)` joins an existing cluster; None starts (or reuses) a local one."""


RENAMED_KEYS = {
    ("rollout", "ray_address"): ("ray", "address"),
    **{("train", f"eval_{key}"): ("eval", key) for key in ("every", "at_start", "size", "suites", "suite_limit")},
    **{("train", key): ("eval", key) for key in ("selection_fraction", "keep_best", "best_metric", "warn_drop",
                                                 "warn_patience")},
}
"""Keys that moved to their component's section: (section, key) -> (section, key). The old spelling still loads for
one release, with a one-line `ConfigDeprecation` note naming the new place. The `train.*` evaluation keys are here
(not one-line errors) because examples/ and the docs used them and every stored run's config holds them."""


class ConfigDeprecation(FutureWarning):
    """A config key written at its old place (`RENAMED_KEYS`): it still works, the note says where it lives now."""


def _move_renamed_keys(data: Any) -> Any:
    """`RunConfig`'s raw input with every renamed key moved to its new place (a note each); the old and the new
    key both given with different values is a one-line error."""
    import warnings

    if not isinstance(data, dict):
        return data
    data = dict(data)
    for (section, key), (new_section, new_key) in RENAMED_KEYS.items():
        old = data.get(section)
        if not isinstance(old, dict) or key not in old:
            continue
        value = old[key]
        data[section] = {k: v for k, v in old.items() if k != key}
        target = dict(data.get(new_section) or {})
        if new_key in target and target[new_key] != value:
            raise ValueError(f"{section}.{key} (old) and {new_section}.{new_key} (new) disagree: keep only "
                             f"{new_section}.{new_key}")
        target[new_key] = value
        data[new_section] = target
        warnings.warn(f"config: {section}.{key} is now {new_section}.{new_key} (the old key works for this release)",
                      ConfigDeprecation, stacklevel=2)
    return data


class MonitorsConfig(_Section):
    """Run monitors (`posttrain.monitor`): checks over the step series after every step; each alert goes to the
    console, the run store's `alerts` and the dashboard, and `train.on_alert` says whether training goes on."""

    enabled: list[Literal["entropy_collapse", "kl_blowup", "length_drift", "reward_hacking", "verifier_errors",
                          "grad_norm_spike", "domain_starved", "sandbox_failures", "format_collapse"]] = [
        "entropy_collapse", "kl_blowup", "length_drift", "reward_hacking", "verifier_errors", "grad_norm_spike",
        "domain_starved", "sandbox_failures", "format_collapse"]
    """The monitors that run (all by default; [] turns them off)."""
    baseline: int = Field(5, ge=1)
    """Steps whose median is a series' baseline (entropy, response length); those checks wait for it."""
    window: int = Field(5, ge=1)
    """Recent steps averaged before comparing with a baseline or a limit."""
    entropy_drop: float = Field(0.2, gt=0.0, lt=1.0)
    """Entropy collapse: recent mean entropy below this fraction of its baseline..."""
    entropy_floor: float = Field(0.005, ge=0.0)
    """...or below this many nats per token."""
    kl_max: float = Field(1.0, gt=0.0)
    """KL blow-up: KL to the reference (`rl.kl_beta` > 0) above this many nats per token..."""
    kl_factor: float = Field(10.0, gt=1.0)
    """...or above this multiple of its median over the previous `spike_window` steps (and above `kl_floor`)."""
    kl_floor: float = Field(0.05, ge=0.0)
    """Smallest KL the jump rule flags (tiny KLs jump by large factors harmlessly)."""
    length_ratio: float = Field(2.0, gt=1.0)
    """Length drift: recent mean response length above this multiple of its baseline, or below its inverse."""
    hack_rise: float = Field(0.1, gt=0.0)
    """Reward hacking: mean training reward up by at least this since the held-out best..."""
    hack_drop: float = Field(0.15, gt=0.0)
    """...while the newest held-out score is at least this below that best."""
    hack_window: int = Field(10, ge=1)
    """Steps of training reward averaged on each side of the held-out best."""
    hack_smooth: int = Field(1, ge=1)
    """Held-out evaluations averaged before the comparison (damps evaluation noise). benchmarks/monitors.py chose
    1 with `hack_drop` 0.15 on its selection seeds (2 with 0.1 did as well there, with more false alarms)."""
    verifier_error_rate: float = Field(0.2, gt=0.0, le=1.0)
    """Verifier errors: share of the recent `window` steps' samples whose verdict is an error, at or above this."""
    spike_window: int = Field(10, ge=2)
    """Steps whose median a spike (gradient norm, KL) is measured against."""
    grad_factor: float = Field(10.0, gt=1.0)
    """Gradient-norm spike: the newest norm (before clipping) above this multiple of its recent median..."""
    grad_floor: float = Field(1.0, ge=0.0)
    """...and above this norm."""
    starve_patience: int = Field(10, ge=1)
    """Starved domain: this many steps in a row without an informative group in a domain."""
    sandbox_limit: float = Field(3.0, gt=0.0)
    """Sandbox failures: this many sandbox worker failures within the recent `window` steps."""
    format_error_rate: float = Field(0.5, gt=0.0, le=1.0)
    """Format collapse (agent domains): the share of malformed calls over the recent `window` steps at or above
    this..."""
    format_factor: float = Field(2.0, gt=1.0)
    """...and at or above this multiple of its baseline (the median of the first `baseline` steps)."""


class TrainConfig(_Section):
    steps: int = Field(300, ge=1)
    """RL steps (one batch of groups each)."""
    prompts_per_step: int = Field(16, ge=1)
    """Groups per optimizer step, after dropping groups with zero reward variance."""
    drop_zero_variance: bool = True
    signal_from: Literal["outcome", "reward"] = "outcome"
    """Which scores decide that a group has variance (is kept, and counts as informative for the curriculum):
    outcome, the verifier's own, so that a process score (an agent domain's `process_weight`) only refines the
    ranking inside groups whose outcome varies; or reward, the blended training reward, so that a group whose
    episodes differ only in process score is trained on too. Pair reward with `rl.advantage = "grpo_batch"`:
    per-group std normalisation would scale such small differences up to unit advantages."""
    curriculum: Literal["pass_rate", "uniform", "scheduler"] = "pass_rate"
    """Which training tasks to draw: pass_rate skips tasks seen always or never solved (zero-variance groups);
    uniform draws the train split uniformly (with drop_zero_variance = false: the sampling recipe off);
    scheduler: the multi-domain task scheduler (`[scheduler]`: learnability weights, priorities, retirement,
    the difficulty band, costs, the failure bank)."""
    max_fill_rounds: int = Field(4, ge=1)
    """Sampling rounds allowed to refill the batch after dropping uninformative groups."""
    checkpoint_every: int = Field(100, ge=0)
    """Write an HF-format checkpoint (plus optimizer and RNG state) every K steps; 0 disables."""
    keep_checkpoints: int = Field(2, ge=1)
    """Newest checkpoints kept on disk; older ones are deleted (and dropped from the store's index)."""
    store_samples: bool = True
    """Store every sampled completion with its verdict in the run store."""
    monitors: MonitorsConfig = MonitorsConfig()
    """Run monitors: entropy collapse, KL blow-up, length drift, reward hacking, verifier errors, gradient
    spikes, starved domains, sandbox failures (thresholds in the section)."""
    on_alert: Literal["warn", "stop"] = "warn"
    """What a monitor's alert does: warn and train on, or stop (after a checkpoint, saying why)."""


EvalSplit = Literal["selection", "reporting", "held_out", "train", "all"]
"""Which of a run's own tasks `posttrain eval --model RUN` evaluates (`rl/own_eval.py`, docs/eval.md)."""


class EvalConfig(_Section):
    """Evaluation: the held-out checks during training (when, on which tasks, what they select) and the settings
    `posttrain eval --model RUN` samples the run with (each of its flags overrides its field; a model that is not a
    training run gets these defaults). In-training evaluation is always greedy, one sample per task, at the
    rollouts' `max_tokens`: the fields from `samples` on are `posttrain eval`'s only."""

    every: int = Field(50, ge=0)
    """Held-out greedy evaluation every K training steps, stored per task (0: only at the end)."""
    at_start: bool = True
    """Also evaluate before the first step of a fresh run (with every > 0): the curve starts at the initial model,
    and best/ stays the initial model while no later evaluation reaches its score."""
    size: int = Field(500, ge=1)
    """Held-out tasks per domain and evaluation (fewer when the held-out split is smaller); also the number of
    training-split tasks of `split = "train"`."""
    selection_fraction: float = Field(0.5, ge=0.0, lt=1.0)
    """Share of the `size` held-out problems that the evaluations during training run on (and that select best/);
    the rest, the reporting half, is evaluated only at the end, so a reported figure is never the one a checkpoint
    was chosen on. 0: one set for both (selection bias included)."""
    suites: list[str] = []
    """Further suites (`posttrain tasks list` names or .jsonl paths) evaluated greedily at every held-out
    evaluation, stored per task in the run store; a task that passed before and fails now is flagged."""
    suite_limit: int | None = Field(None, ge=1)
    """Only the first N tasks of each of `suites` (None: all)."""
    keep_best: bool = True
    """Keep the best model by the held-out metric as <run>/best (ties go to the later step); `--model RUN`
    then resolves to it."""
    best_metric: Literal["greedy_accuracy"] = "greedy_accuracy"
    """The held-out metric that selects best/ and that the early warning watches."""
    warn_drop: float = Field(0.05, ge=0.0, le=1.0)
    """Early warning: the held-out metric this far below its best..."""
    warn_patience: int = Field(2, ge=1)
    """...for this many evaluations in a row says so (live progress, the run store's `alerts`)."""
    samples: int = Field(1, ge=1)
    """`posttrain eval`: samples per task (`-n`)."""
    ks: list[int] = [1]
    """`posttrain eval`: the pass@k values reported (`-k 1,8,16`), kept sorted and distinct."""
    temperature: float = Field(0.0, ge=0.0)
    """`posttrain eval`: sampling temperature (`-t`; 0: greedy, which allows one sample per task only)."""
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    """`posttrain eval`: nucleus sampling (`--top-p`; evaluation may filter, training may not)."""
    max_tokens: int | None = Field(None, ge=1)
    """`posttrain eval`: completion cap (`--max-tokens`; None: the run's rollout cap on its own domains, a suite's
    own budget on any other)."""
    seed: int = 0
    """`posttrain eval`: sampling seed (`--seed`; per chunk of tasks, so results do not depend on resumes)."""
    repeat: int = Field(1, ge=1)
    """`posttrain eval`: runs of the whole evaluation with the same seeds (`--repeat`), for each task's flip rate."""
    batch: int | None = Field(None, ge=1)
    """`posttrain eval`: tasks per engine call (`--batch`; None: a suite per call on the run's own domains, as in
    training, so `split = "selection"` reproduces a step's stored figure; 32 on any other suite)."""
    split: EvalSplit = "reporting"
    """`posttrain eval --model RUN`: which of the run's own tasks (`--split`): reporting, the held-out half no
    checkpoint was chosen on; selection, the half evaluated during training; held_out, both; train, `size` tasks of
    the training split; all, held_out and train."""

    @model_validator(mode="after")
    def _sampled(self) -> "EvalConfig":
        if any(k < 1 for k in self.ks) or not self.ks:
            raise ValueError(f"ks must be pass@k values >= 1, got {self.ks}")
        object.__setattr__(self, "ks", sorted(set(self.ks)))
        if self.samples > 1 and self.temperature == 0:
            raise ValueError(f"samples = {self.samples} at temperature = 0 are {self.samples} copies of one greedy "
                             "answer: set a temperature > 0 for pass@k")
        return self


class SchedulerConfig(_Section):
    """The multi-domain task scheduler (`train.curriculum = "scheduler"`, `scheduler/task_scheduler.py`)."""

    unseen_weight: float = Field(0.25, gt=0.0, le=0.25)
    """Weight of a task never attempted (0.25: the most p(1-p) can be, so unseen tasks are tried first)."""
    min_weight: float = Field(0.01, ge=0.0, le=0.25)
    """Floor of a seen task's weight E[p(1-p)] under its Beta(1 + passes, 1 + failures) posterior."""
    min_attempts: int = Field(16, ge=1)
    """Attempts before a task solved always or never is retired."""
    recheck_every: int = Field(50, ge=1)
    """Re-checks: a retired task is accepted 1 in this many draws; a retired domain gets a probe group this many
    steps after it was retired (and after each probe, times recheck_backoff per probe that found nothing)."""
    recheck_backoff: float = Field(2.0, ge=1.0)
    """A retired domain's wait for its next probe grows by this factor after each probe that did not bring it back,
    up to 8x recheck_every at the default (1.0: a fixed period)."""
    domain_floor: float = Field(0.05, gt=0.0, le=1.0)
    """The least a live domain's learnability (its recent informative share) counts for its draw weight."""
    domain_rate: float = Field(0.05, gt=0.0, le=1.0)
    """Weight of each new group in a domain's informative share and pass rate (moving averages)."""
    retire_after_groups: int = Field(8, ge=1)
    """Groups of a domain before it may be retired (informative share at most retire_informative, pass rate 0 or
    1, and its difficulty knob, if any, at the end of its band)."""
    retire_informative: float = Field(0.02, ge=0.0, le=1.0)
    """A domain whose informative share falls to this is retired (when its pass rate is 0 or 1)."""
    retire_dry_after: int = Field(32, ge=0)
    """A domain with no passing sample in its last this many groups is retired (at the easy end of its band, if it
    has one), whatever its scores vary by below the pass mark, and a re-check brings it back only with a passing
    sample (0: off; then only the informative share retires a domain, and partial credit keeps one live)."""
    band_low: float = Field(0.2, ge=0.0, le=1.0)
    """Below this pass rate a domain with a `band` moves one level easier."""
    band_high: float = Field(0.8, ge=0.0, le=1.0)
    """Above this pass rate a domain with a `band` moves one level harder."""
    band_window: int = Field(64, ge=1)
    """Valid attempts at a level before its pass rate decides a move."""
    revisit: float = Field(0.5, ge=0.0, le=1.0)
    """Share of a domain's fresh draws taken from its pool of tasks whose last group had variance (by weight)."""
    pool_size: int = Field(64, ge=0)
    """Recently informative tasks kept per domain for revisits (0: none)."""
    replay_share: float = Field(0.25, ge=0.0, le=1.0)
    """The most of each draw that goes to replays of banked failures."""
    replay_decay: float = Field(0.5, gt=0.0, lt=1.0)
    """Share of a banked failure's replay weight each replay costs (it leaves below 0.1, or once it passes)."""
    max_inflight: int = Field(0, ge=0)
    """Tasks of one domain handed out and not yet back, at most (0: no limit)."""
    long_factor: float = Field(10.0, gt=1.0)
    """A task expected to take this many times the median domain's seconds goes to the long lane."""
    timeout_factor: float = Field(20.0, gt=1.0)
    """A domain's timeout: this many times its expected seconds (at least 30 s)."""
    task_model: Literal["beta", "ability"] = "beta"
    """How a task's worth is estimated. "beta": E[p(1-p)] under its own Beta(1 + passes, 1 + failures) posterior;
    tasks solved always or never after min_attempts are retired. "ability": a Rasch model per domain, pass rate
    sigmoid(ability - difficulty), fitted online (a Kalman step per group): the domain's ability moves with all its
    groups, so its tasks get easier together as the model learns; an unseen task starts at the mean difficulty of
    the domain's tried ones (empirical Bayes); the pool keeps every tried task, a revisit takes the weightiest one
    not already out, and a fresh task is drawn when no known one is worth more than an unseen one (no retirement
    by counts: a task's weight falls and rises with its expected p(1-p))."""
    ability_drift: float = Field(0.01, gt=0.0)
    """task_model "ability": variance added to a domain's ability per group (how fast it may move, logits^2)."""
    difficulty_var: float = Field(4.0, gt=0.0)
    """task_model "ability": prior variance of a task's difficulty around its domain's typical one (logits^2)."""
    retire: bool = True
    """Retire tasks solved always or never (min_attempts) and domains that stopped carrying signal or passing
    (retire_after_groups, retire_dry_after), with re-check probes to bring them back. False: nothing is retired, a
    task keeps its E[p(1-p)] weight and a domain its learnability share (never below domain_floor); with
    replay_share = 0 that is plain learnability sampling, the ablation of the scheduler's machinery."""

    @model_validator(mode="after")
    def _band(self) -> "SchedulerConfig":
        if self.band_low >= self.band_high:
            raise ValueError(f"band_low ({self.band_low}) must be below band_high ({self.band_high})")
        return self


class RunConfig(_Section):
    name: str = "quickstart"
    """The run's directory name under run_dir."""
    seed: int = 0
    """Seeds the sampler, the curriculum and the held-out draw."""
    run_dir: str = "runs"
    """Parent directory of runs; each run lives in <run_dir>/<name>."""
    model: ModelSection = ModelSection()
    tasks: TasksConfig = TasksConfig()
    reward: RewardConfig = RewardConfig()
    domains: list[DomainConfig] = []
    """Training domains (`[[domains]]` tables). Empty: one domain from `tasks` and `reward`; set, `tasks`
    and `reward.verifier` must be left at their defaults (reward's timeout and length cap still apply)."""
    sampling: SamplingConfig = SamplingConfig()
    engine: EngineConfig = EngineConfig()
    rollout: RolloutConfig = RolloutConfig()
    sandbox: SandboxConfig = SandboxConfig()
    rl: RLConfig = RLConfig()
    train: TrainConfig = TrainConfig()
    scheduler: SchedulerConfig = SchedulerConfig()
    eval: EvalConfig = EvalConfig()
    """`[eval]`: held-out evaluation during training and `posttrain eval`'s defaults for this run."""
    tensorboard: bool = True
    """Write TensorBoard event files to <run>/tensorboard."""
    trackers: list[Literal["wandb", "mlflow", "trackio"]] = []
    """Experiment trackers beside TensorBoard (`posttrain.tracking`; extras of the same names), fed the same
    `train/...` and `eval/...` scalars: W&B (`WANDB_MODE=offline` keeps it local), MLflow (`MLFLOW_TRACKING_URI`,
    default a file store in <run>/mlruns), trackio (its local database)."""
    tracker_project: str = "posttrain"
    """The project (W&B, trackio) or experiment (MLflow) the trackers file runs under."""
    ray: RayConfig = RayConfig()
    """`[ray]`: the cluster the Ray back ends join (`rollout.backend`, `sandbox.backend` = "ray")."""

    @model_validator(mode="before")
    @classmethod
    def _renamed_keys(cls, data: Any) -> Any:
        return _move_renamed_keys(data)

    @model_validator(mode="after")
    def _one_way_to_say_domains(self) -> "RunConfig":
        if self.domains:
            if self.tasks != TasksConfig() or self.reward.verifier is not None:
                raise ValueError("give the training tasks either as [[domains]] or as [tasks]/[reward].verifier, not both")
            # entries that expand (globs, lists, levels) are told apart by the names they expand to (tasks/expand.py)
            labels = [d.label for d in self.domains if not d.expands]
            if len(set(labels)) != len(labels):
                raise ValueError(f"[[domains]] names must be distinct, got {labels} (set `name` to tell them apart)")
        _check_worked_format(self)
        _check_learnable(self)
        if self.engine.kind == "local" and self.engine.device != self.rl.device:
            raise ValueError(f"engine.device ({self.engine.device!r}) must equal rl.device ({self.rl.device!r}) for the "
                             "local engine: it samples with the learner's own module")
        return self

    def domain_configs(self) -> list[DomainConfig]:
        """The training domains: `[[domains]]`, or the one `tasks` + `reward` describe."""
        if self.domains:
            return list(self.domains)
        t = self.tasks
        options: dict[str, Any] = {"held_out_fraction": t.held_out_fraction}
        if t.source.startswith(("arith:", "code:")):  # the generators whose difficulty knob is `digits`
            options["digits"] = t.digits
        if t.min_digits is not None:
            options["min_digits"] = t.min_digits
        if t.on_error != "fail":
            options["on_error"] = t.on_error
        options.update(t.options)
        return [DomainConfig(source=t.source, verifier=self.reward.verifier, options=options)]

    @property
    def path(self) -> Path:
        return Path(self.run_dir) / self.name


def _check_learnable(cfg: "RunConfig") -> None:
    """Settings under which no step can learn anything: every advantage here is group-relative (a completion is
    compared with the others of its task's group), so a group of one, or n copies of one greedy answer, has zero
    advantage everywhere. (A `max_tokens` too short for any gold answer needs the tasks: `rl/preflight.py`.)"""
    s = cfg.sampling
    if s.n == 1:
        raise ValueError(f"sampling.n = 1 with rl.advantage = {cfg.rl.advantage!r}: each completion is compared with "
                         "the others of its group, so a group of one has zero advantage and nothing is learnt; set "
                         "sampling.n >= 2 (8-16 is usual)")
    if s.temperature == 0:
        raise ValueError("sampling.temperature = 0 samples the same greedy completion n times: every group has zero "
                         "reward variance and nothing is learnt; train at a temperature > 0 (1.0 is usual; evaluation "
                         "is greedy anyway)")


def _check_worked_format(cfg: "RunConfig") -> None:
    """The built-in base and an RL task source of its own family must write answers the same way (a base
    pre-trained on worked solutions scores 0 on bare answers, and the other way round)."""
    base = cfg.model.base
    if cfg.model.path is not None or base.family not in _WORKED_FAMILIES:
        return
    for d in cfg.domain_configs():
        if d.source == f"arith:{base.family}":
            worked = d.options.get("worked", True)  # the arith domain's default for these families
            if worked != base.worked:
                raise ValueError(f"{d.source} tasks with worked = {str(worked).lower()} but the built-in base is "
                                 f"pre-trained with model.base.worked = {str(base.worked).lower()}: set both the same")


def _format_error(exc: ValidationError, raw: dict[str, Any]) -> str:
    lines = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"])
        if err["type"] == "extra_forbidden":
            lines.append(f"config: unknown key {loc!r} (check the spelling; `posttrain config` prints every key)")
        else:
            value = err.get("input")
            shown = "" if isinstance(value, dict) else f" = {value!r}"
            msg = err["msg"].removeprefix("Value error, ")
            lines.append(f"config: {loc}{shown}: {msg}" if loc else f"config: {msg}")
    return "\n".join(lines)


def parse_literal(text: str) -> Any:
    """A TOML literal if it is one (numbers, booleans, quoted strings, arrays, inline tables), else the raw
    string: the one parser of `--set a.b=VALUE` and `--suite-opt KEY=VALUE` values."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def apply_overrides(raw: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"config: override {item!r} must look like key.path=value")
        key, value = item.split("=", 1)
        node = raw
        parts = key.strip().split(".")
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError(f"config: cannot set {key!r}: {part!r} is not a section")
            node = child
        node[parts[-1]] = parse_literal(value.strip())
    return raw


def build_config(raw: dict[str, Any]) -> RunConfig:
    try:
        return RunConfig.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(_format_error(exc, raw)) from None


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> RunConfig:
    """Defaults <- TOML file <- overrides, validated once at the end."""
    raw: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        if not p.exists():
            raise ConfigError(f"config: file {p} not found")
        try:
            raw = tomllib.loads(p.read_text())
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config: {p} is not valid TOML: {exc}") from None
    return build_config(apply_overrides(raw, overrides or []))
