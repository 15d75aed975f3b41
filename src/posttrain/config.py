"""Typed, validated run configuration: TOML files plus `--set a.b=c` overrides.

Covers: one pydantic model per component, nested in `RunConfig`; loading from
TOML; dotted overrides whose values are parsed as TOML literals; one-line
error messages naming the field, the value and what is allowed.
Does not cover: what the components do with their settings.

The defaults are the quickstart: the built-in tiny model learning 3-digit
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
    family: Literal["add", "sub", "addsub", "mul", "chain", "code:ops", "code:linear"] = "add"
    """The arithmetic family it is pre-trained on (also the quickstart's RL task), or a code-writing family
    (`code:ops`, `code:linear`; see docs/code_domain.md), whose difficulty knob is `digits` too."""
    digits: int = Field(2, ge=1, le=9)
    """Operands have up to this many digits (2: a 0.86M model reaches the band in a minute or two on 2 cores)."""
    min_digits: int | None = Field(None, ge=1, le=9)
    """Operand lengths drawn uniformly from min_digits..digits; None: values uniform below 10**digits."""
    held_out_fraction: float = Field(0.15, gt=0.0, lt=1.0)
    """Share of problems never trained on. The split is a threshold on one hash, so an RL task set with
    held_out_fraction <= this one holds out a subset of these: the base model never saw any of them."""
    target_low: float = Field(0.40, ge=0.0, le=1.0)
    """Stop pre-training once held-out greedy accuracy reaches this..."""
    target_high: float = Field(0.65, ge=0.0, le=1.0)
    """...and prefer a checkpoint at or below this (the band leaves RL room to improve)."""
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

    @model_validator(mode="after")
    def _band(self) -> "BaseModelConfig":
        if self.target_low > self.target_high:
            raise ValueError(f"target_low ({self.target_low}) must not exceed target_high ({self.target_high})")
        return self


class ModelSection(_Section):
    path: str | None = None
    """An HF-format checkpoint directory (config.json, model.safetensors, tokenizer.json); None = the built-in base."""
    base: BaseModelConfig = BaseModelConfig()


class TasksConfig(_Section):
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
    verifier: str | dict[str, Any] = "exact"
    """`exact`, `numeric`, `per_task` (each task's `meta.verifier`), any registered kind (`math`, `tags`, ...),
    or a spec table such as `{type = "rubric", parts = [{verifier = "math", weight = 0.8}, ...]}` (docs/rewards.md)."""
    tolerance: float = Field(0.0, ge=0.0)
    """Absolute tolerance of the numeric verifier."""
    extract: Literal["full", "last_number", "boxed", "tag", "auto"] = "full"
    """How exact/numeric read the answer: the whole text, the last number, \\boxed{}, <answer> tags, or auto
    (boxed, else tag, else last number)."""
    timeout_s: float | None = Field(300.0, gt=0.0)
    """Bound on one rollout batch's verification; past it every item is a TIMEOUT verdict (excluded from
    advantages). None: unbounded."""
    max_response_chars: int | None = Field(None, ge=1)
    """Output-length cap applied before verification: a longer response scores `over_length_score`
    (passed = false, recorded with details) without being verified. None: no cap."""
    over_length_score: float = 0.0
    """The reward of a response over `max_response_chars` (0, or a negative penalty)."""

    @model_validator(mode="after")
    def _known_verifier(self) -> "RewardConfig":
        from posttrain.rewards import build_verifier

        try:
            build_verifier(self.verifier, self.extract, self.tolerance)
        except ImportError as exc:
            raise ValueError(str(exc)) from None
        return self


class SamplingConfig(_Section):
    n: int = Field(16, ge=1)
    """Group size: samples per task."""
    temperature: float = Field(1.0, ge=0.0)
    """Sampling temperature; the learner scores logprobs at the same temperature."""
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    """Nucleus filtering (1.0: off). Behaviour logprobs are those of the filtered distribution."""
    top_k: int = Field(0, ge=0)
    """Keep only the k most likely tokens (0: off)."""
    max_tokens: int = Field(8, ge=1)
    """Completion length cap; the Dr.GRPO aggregation divides by it."""


class RLConfig(_Section):
    advantage: Literal["grpo", "dr_grpo"] = "grpo"
    """grpo: (r - mean) / (std + eps); dr_grpo: r - mean (no std normalisation)."""
    loss_agg: Literal["token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm"] = "token_mean"
    clip_low: float = Field(0.2, ge=0.0)
    clip_high: float = Field(0.28, ge=0.0)
    """Upper clip of the ratio: above clip_low is DAPO's clip-higher."""
    kl_beta: float = Field(0.0, ge=0.0)
    """Weight of the k3 KL penalty to the initial (reference) policy; 0 disables it and its forward pass."""
    lr: float = Field(3e-4, gt=0.0)
    """AdamW learning rate (constant after warm-up). Measured here: 1e-3 collapsed TRL's policy in ~50 steps."""
    weight_decay: float = Field(0.0, ge=0.0)
    grad_clip: float = Field(1.0, gt=0.0)
    """Global gradient-norm clip."""
    epochs: int = Field(1, ge=1)
    """Passes over each batch of groups; > 1 makes the ratio (and so the clip) matter."""
    minibatches: int = Field(1, ge=1)
    """Optimizer steps per epoch (the batch is split in this many parts)."""
    warmup_steps: int = Field(0, ge=0)
    """Linear learning-rate warm-up, in optimizer steps."""


class TrainConfig(_Section):
    steps: int = Field(300, ge=1)
    """RL steps (one batch of groups each)."""
    prompts_per_step: int = Field(16, ge=1)
    """Groups per optimizer step, after dropping groups with zero reward variance."""
    drop_zero_variance: bool = True
    max_fill_rounds: int = Field(4, ge=1)
    """Sampling rounds allowed to refill the batch after dropping uninformative groups."""
    eval_every: int = Field(100, ge=0)
    """Held-out greedy evaluation every K steps, stored per task (0: only at the end)."""
    eval_size: int = Field(500, ge=1)
    """Held-out tasks per evaluation (fewer when the held-out split is smaller)."""
    eval_suites: list[str] = []
    """Held-out suites (`posttrain tasks list` names or .jsonl paths) evaluated greedily at every held-out
    evaluation, stored per task in the run store; a task that passed before and fails now is flagged."""
    eval_suite_limit: int | None = Field(None, ge=1)
    """Only the first N tasks of each of `eval_suites` (None: all)."""
    checkpoint_every: int = Field(100, ge=0)
    """Write an HF-format checkpoint (plus optimizer and RNG state) every K steps; 0 disables."""
    keep_checkpoints: int = Field(2, ge=1)
    """Newest checkpoints kept on disk; older ones are deleted (and dropped from the store's index)."""
    store_samples: bool = True
    """Store every sampled completion with its verdict in the run store."""


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
    sampling: SamplingConfig = SamplingConfig()
    rl: RLConfig = RLConfig()
    train: TrainConfig = TrainConfig()
    tensorboard: bool = True
    """Write TensorBoard event files to <run>/tensorboard."""

    @property
    def path(self) -> Path:
        return Path(self.run_dir) / self.name


def _format_error(exc: ValidationError, raw: dict[str, Any]) -> str:
    lines = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"])
        if err["type"] == "extra_forbidden":
            lines.append(f"config: unknown key {loc!r} (check the spelling; `posttrain config` prints every key)")
        else:
            value = err.get("input")
            shown = "" if isinstance(value, dict) else f" = {value!r}"
            lines.append(f"config: {loc}{shown}: {err['msg']}")
    return "\n".join(lines)


def _parse_value(text: str) -> Any:
    """A TOML literal if it is one (numbers, booleans, quoted strings, arrays), else the raw string."""
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
        node[parts[-1]] = _parse_value(value.strip())
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
