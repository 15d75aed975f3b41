"""Building apart from looping: every component of a run from its config section alone.

Covers: `Components` and `build(cfg)`, and one builder per section, so a
worker process (an async producer, a Ray actor, a test) can build just the
piece it needs: `build_model` (`model`: a path, a run, or the built-in base),
`build_engine` (`engine`, in `engine/build.py`), `build_verifier` (a spec plus `reward`'s hygiene),
`build_domains` (`domains`, or the `tasks` + `reward` sugar), `build_sandboxes` (`[sandbox]`: where the code
verifiers' executions run and the agent sessions open, passed to the rollouter and the evaluations), `build_rollouter`
(`rollout` + `sampling` + `reward.timeout_s`), `build_curriculum`, and
`build_learner` (`rl`; `rl.lora` injects adapters into the model before the
engine is built; under torchrun the `DataParallelLearner` of `rl.data_parallel`, each rank's engine on its
own sampling seed, and under FSDP on a whole copy of the weights). Problems a pure config cannot see (an unknown verifier kind,
a task file's bad lines, an engine that cannot load weights)
surface here as one-line `ConfigError`s / `UserError`s, before any step.
Does not cover: the loop, evaluation hooks, checkpoints (`rl/trainer.py`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from posttrain.config import ConfigError, DomainConfig, EngineConfig, EvalConfig, ModelSection, RewardConfig, RunConfig
from posttrain.engine.base import Engine
from posttrain.engine.build import build_engine
from posttrain.models.llama import CausalLM
from posttrain.models.prompting import PromptRenderer
from posttrain.models.tokenizer import Tokenizer
from posttrain.rewards import build_verifier as verifier_from_spec
from posttrain.rewards.base import Verifier
from posttrain.rl.backends import Backends, DataParallel, OneProcess, device_for, lead_first
from posttrain.rl.learner import Learner
from posttrain.rl.preflight import check_answer_room, domain_rooms
from posttrain.rl.rollout import Rollouter, SingleTurnRollouter
from posttrain.sandbox.sandboxes import Sandboxes, local_sandboxes
from posttrain.scheduler.curriculum import Curriculum, DomainMixture, PassRateCurriculum, UniformCurriculum
from posttrain.store.run_store import RunStore
from posttrain.tasks.base import split_of
from posttrain.tasks.domains import Domain, load_domain
from posttrain.tasks.suites import Suite
from posttrain.types import SamplingParams

if TYPE_CHECKING:
    from posttrain.recipes.builtin import BaseBuild


@dataclass
class Components:
    """Everything one run is made of, built from its config."""

    cfg: RunConfig
    model: CausalLM
    tokenizer: Tokenizer
    init_path: Path  # where the initial weights came from
    engine: Engine
    shares_weights: bool  # the engine samples with the learner's own module (no copy, no correction)
    domains: list[Domain]
    params: SamplingParams  # the rollouts' sampling, n included
    rollouter: Rollouter
    curriculum: Curriculum
    learner: Learner
    held_out: list[Suite]  # per domain: the held-out tasks evaluated during training (the selection part)
    reporting: list[Suite]  # per domain: the held-out tasks kept for the final report, disjoint from held_out
    eval_suites: dict[str, Suite] = field(default_factory=dict)  # `eval.suites`, by eval name
    store: RunStore | None = None
    base: BaseBuild | None = None  # the built-in base's build when the model is the built-in base
    sandboxes: Sandboxes = field(default_factory=local_sandboxes)  # `[sandbox]`: verifications, agent sessions
    dp: DataParallel = field(default_factory=OneProcess)  # this rank (`OneProcess` unless under torchrun)
    backends: Backends = field(default_factory=Backends)  # the optional back ends the wiring layer supplied
    whole_model: CausalLM | None = None  # the policy with every weight in place: `model`, or FSDP's engine copy
    renderer: PromptRenderer = field(default_factory=PromptRenderer)  # how tasks are prompted: rollouts and evaluations


def build_model(cfg: RunConfig) -> tuple[CausalLM, Tokenizer, Path, BaseBuild | None]:
    """The initial policy: `model.path` (a checkpoint or a run), else the built-in base for `model.base`."""
    from posttrain.models.io import load_model
    from posttrain.resolve import locate_model

    where = locate_model(cfg.model.path or "builtin", base=cfg.model.base)
    model, tokenizer = load_model(where.path)
    return model, tokenizer, where.path, where.base


def build_policy(cfg: RunConfig, ranks: DataParallel) -> tuple[CausalLM, Tokenizer, Path, BaseBuild | None]:
    """`build_model` on every rank, with `rl.lora`'s adapters applied (before the engine is built: it samples with
    them, through the shared module)."""
    # the built-in base's one-time build writes a shared cache: rank 0 first, the others then load it
    model, tokenizer, init_path, base = lead_first(ranks, lambda: build_model(cfg))
    if cfg.rl.lora is not None:
        from posttrain.models.lora import apply_lora

        lora = cfg.rl.lora
        apply_lora(model, lora.r, lora.alpha, lora.targets, lora.dropout, seed=cfg.seed)
    return model, tokenizer, init_path, base


def build_engine_for(cfg: EngineConfig, model: CausalLM, tokenizer: Tokenizer, seed: int = 0) -> tuple[Engine, bool]:
    """(engine, shares_weights): the local fp32 engine samples with the learner's own module; at bf16/int8 it
    samples from a rounded copy, so the learner corrects with truncated importance sampling."""
    return build_engine(cfg, model, tokenizer, seed), cfg.kind == "local" and cfg.precision == "fp32"


def build_verifier(spec: Any, reward: RewardConfig) -> Verifier:
    """A verifier spec with the `reward` section's extraction, tolerance and length cap; a bad spec is a ConfigError."""
    try:
        return verifier_from_spec(spec, reward.extract, reward.tolerance, reward.max_response_chars, reward.over_length_score)
    except (ValueError, ImportError) as exc:
        raise ConfigError(f"config: verifier {spec!r}: {exc}") from None


def _cap(verifier: Verifier, reward: RewardConfig) -> Verifier:
    from posttrain.rewards import LengthCapped

    if reward.max_response_chars is None:
        return verifier
    return LengthCapped(verifier, reward.max_response_chars, reward.over_length_score)


def build_domain(dc: DomainConfig, reward: RewardConfig) -> Domain:
    """One `[[domains]]` entry: the registry's domain, its verifier overridden when the entry names one."""
    if not isinstance(dc.source, str):  # a list: `domain_entries` expands it first
        raise ConfigError(f"config: [[domains]] {dc.label}: a list of sources must be expanded (domain_entries)")
    domain = load_domain(dc.source, **dc.options)
    verifier = build_verifier(dc.verifier, reward) if dc.verifier is not None else _cap(domain.verifier, reward)
    if dc.verifier is not None and domain.meta.get("worked") and getattr(verifier, "extract", None) == "full":
        # a worked solution (`47*8=376;...=1786`) never equals the bare gold answer: every reward would be 0
        raise ConfigError(f"config: {dc.source} answers are worked solutions that end in the result, but the verifier "
                          "reads the whole response: set reward.extract = \"last_number\", or leave the verifier unset "
                          "(the domain's own reads the last number)")
    domain = domain.with_verifier(verifier)
    domain.name, domain.weight = dc.label, dc.weight
    return domain


def domain_entries(cfg: RunConfig) -> list[DomainConfig]:
    """The run's domains, one entry each: `[[domains]]` with globs, lists and levels expanded (`tasks/expand.py`)."""
    from posttrain.tasks.expand import expand_domains

    return expand_domains(cfg.domain_configs())


def build_domains(cfg: RunConfig) -> list[Domain]:
    domains = [build_domain(dc, cfg.reward) for dc in domain_entries(cfg)]
    if cfg.model.system_prompt:  # an agent's prefix opens with the system prompt too (training and its evaluations)
        from posttrain.agent.spec import spec_of, with_system_prompt

        for d in domains:
            spec = spec_of(d)
            if spec is not None:
                d.agent = with_system_prompt(spec, cfg.model.system_prompt)
    return domains


def build_sandboxes(cfg: RunConfig, backends: Backends | None = None) -> Sandboxes:
    """`[sandbox]`: where this process's code verifiers execute and its agent sessions open. "local": a sandbox of
    this process, started on first use; "ray": the Ray sandbox workers `backends.ray_sandboxes` builds (supplied by
    the wiring layer; without Ray, a one-line `UserError` naming the extra)."""
    sc = cfg.sandbox
    if sc.backend == "local":
        return local_sandboxes(max_concurrency=sc.max_concurrency)
    r = cfg.rollout
    if r.mode == "async" and r.backend == "local" and r.producer_kind == "process" and cfg.ray.address is None:
        raise ConfigError("config: sandbox.backend = \"ray\" with producer processes needs ray.address (rollout.ray_address "
                          "before; each process joins that cluster; without one it would start a cluster of its own), or "
                          "rollout.producer_kind = \"thread\" or rollout.backend = \"ray\"")
    return (backends or Backends()).need("ray_sandboxes", "sandbox.backend = \"ray\"")(cfg)


def max_tokens_for(cfg: RunConfig, domains: list[Domain]) -> int:
    """`sampling.max_tokens`, else the largest of the domains' own (per-domain caps in `[[domains]]` first)."""
    if cfg.sampling.max_tokens is not None:
        return cfg.sampling.max_tokens
    caps = [dc.max_tokens or d.sampling.max_tokens for dc, d in zip(domain_entries(cfg), domains)]
    return max(caps)


def sampling_params(cfg: RunConfig, domains: list[Domain]) -> SamplingParams:
    s = cfg.sampling
    stops = tuple(dict.fromkeys(stop for d in domains for stop in d.sampling.stop))
    return SamplingParams(n=s.n, temperature=s.temperature, top_p=s.top_p, top_k=s.top_k,
                          max_tokens=max_tokens_for(cfg, domains), stop=stops)


def build_prompt_renderer(m: ModelSection, tokenizer: Tokenizer | None) -> PromptRenderer:
    """`model.prompt_format` and `model.system_prompt` over the initial checkpoint: the one renderer of the run's
    rollouts and evaluations (`engine/prompt_format.py`; the built-in base has no template: raw)."""
    from posttrain.engine.prompt_format import build_renderer
    from posttrain.resolve import locate_model

    checkpoint = locate_model(m.path).path if m.path is not None else None
    return build_renderer(checkpoint, tokenizer, m.prompt_format, m.system_prompt)


def build_rollouter(cfg: RunConfig, engine: Engine, domains: list[Domain], params: SamplingParams,
                    sandboxes: Sandboxes, inline: bool | None = None, renderer: PromptRenderer | None = None
                    ) -> Rollouter:
    """`inline` (default: in the synchronous mode) samples with the engine's blocking `generate`; an async
    producer that owns its engine passes True. An agent domain (`rollouter == "agent"`) gets the
    `AgentRollouter` over its `AgentSpec` (one agent domain per run; it cannot be mixed with single-turn ones),
    its workspaces opened on `sandboxes` (`build_sandboxes`), where the verifications of either kind execute too."""
    agents = [d for d in domains if d.rollouter == "agent"]
    if agents:
        if len(domains) > 1:
            raise ConfigError("config: an agent domain trains alone (mixing it with other domains is not supported yet)")
        from posttrain.agent.rollouter import AgentRollouter
        from posttrain.agent.spec import spec_of

        spec = spec_of(agents[0])
        assert spec is not None  # an agent domain
        renderer = renderer or build_prompt_renderer(cfg.model, engine.tokenizer)  # type: ignore[arg-type]
        if renderer.mode == "chat":
            raise ConfigError("config: agent episodes are written in the built-in text call format, not through a chat "
                              "template yet: set model.prompt_format = \"raw\" for an agent domain")
        return AgentRollouter(engine, sandboxes.workspaces, spec, params, seed=cfg.seed, sandboxes=sandboxes)
    verifiers = {d.name: d.verifier for d in domains} if len(domains) > 1 else {}
    renderer = renderer or build_prompt_renderer(cfg.model, engine.tokenizer)  # type: ignore[arg-type]
    return SingleTurnRollouter(engine, params, domains[0].verifier, renderer, cfg.reward.timeout_s, verifiers,
                               inline=cfg.rollout.mode == "sync" if inline is None else inline, sandboxes=sandboxes)


def build_curriculum(domains: list[Domain], seed: int, kind: str = "pass_rate",
                     signal_from: str = "outcome") -> Curriculum:
    """`train.curriculum`: pass_rate (skip tasks seen always or never solved) or uniform, one per domain."""
    make: Any = UniformCurriculum if kind == "uniform" else partial(PassRateCurriculum, signal_from=signal_from)
    if len(domains) == 1:
        return make(domains[0].source, seed=seed)
    return DomainMixture(
        {d.name: make(d.source, seed=seed + i) for i, d in enumerate(domains)},
        {d.name: d.weight for d in domains},
    )


def build_task_scheduler(cfg: RunConfig, domains: list[Domain]) -> Curriculum:
    """`train.curriculum = "scheduler"`: the multi-domain `TaskScheduler` over every domain, with `[scheduler]`'s
    settings; a domain with a `band` gets its source at any level of its difficulty knob from the registry."""
    from posttrain.scheduler.task_scheduler import DomainSpec, SchedulerSettings, TaskScheduler
    from posttrain.tasks.expand import knob_of

    specs = []
    for dc, d in zip(domain_entries(cfg), domains):
        level = band = source_at = None
        knob = knob_of(str(dc.source))
        if dc.band is not None:
            if knob is None:
                raise ConfigError(f"config: [[domains]] {dc.label}: band needs a domain with a difficulty knob")
            lo, hi = dc.band
            level = min(max(int(dc.options.get(knob, d.meta.get(knob)) or lo), lo), hi)
            band = (lo, hi)

            def source_at(lv: int, dc: DomainConfig = dc, knob: str = knob) -> Any:
                return load_domain(str(dc.source), **{**dc.options, knob: lv}).source

            if level != dc.options.get(knob, d.meta.get(knob)):
                d.source = source_at(level)
        elif knob is not None and isinstance(dc.options.get(knob, d.meta.get(knob)), int):
            level = dc.options.get(knob, d.meta.get(knob))
        specs.append(DomainSpec(d.name, d.source, d.weight, level, band, source_at))
    settings = SchedulerSettings(**cfg.scheduler.model_dump())
    return TaskScheduler(specs, settings, seed=cfg.seed, signal_from=cfg.train.signal_from)


def build_learner(cfg: RunConfig, model: CausalLM, max_tokens: int, shares_weights: bool,
                  dp: DataParallel | None = None, backends: Backends | None = None) -> Learner:
    """The run's learner; over several ranks (`dp`), the `backends.learner` (`DataParallelLearner`) of
    `rl.data_parallel`."""
    mode = cfg.rl.importance_sampling
    # async producers sample with their own copy of older weights; at max_staleness 0 the copy is bitwise the
    # learner's policy, so (like the shared module) it needs no correction
    stale = cfg.rollout.mode == "async" and cfg.rollout.max_staleness > 0
    correct = mode == "on" or (mode == "auto" and (stale or not shares_weights))
    total = cfg.train.steps * cfg.rl.epochs * cfg.rl.minibatches
    if dp is not None and dp.world > 1:
        make = (backends or Backends()).need("learner", "training over several ranks")
        learner: Learner = make(model, cfg.rl, max_tokens, cfg.sampling.temperature, importance_sampling=correct,
                                strategy=cfg.rl.data_parallel, total_updates=total)
        return learner
    return Learner(model, cfg.rl, max_tokens, cfg.sampling.temperature, importance_sampling=correct,
                   total_updates=total)


def data_parallel_from_env(device: str = "cpu", backends: Backends | None = None) -> DataParallel:
    """This torchrun rank (`backends.ranks`: the process group joined, gloo for a CPU `device`, NCCL for CUDA), or
    `OneProcess` (torch.distributed is loaded only under torchrun)."""
    import os

    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return OneProcess()
    join = (backends or Backends()).need("ranks", "a run under torchrun")
    ranks: DataParallel | None = join(device)
    return ranks if ranks is not None else OneProcess()


# each rank samples from its own generator: the same seed everywhere would give every rank the same completions
RANK_SEED_STRIDE = 1_000_003


def for_rank(cfg: RunConfig, dp: DataParallel) -> RunConfig:
    """The run's config on one torchrun rank: `cuda` devices become this rank's GPU; what cannot be spread over
    ranks yet is a one-line `ConfigError`."""
    if cfg.rollout.mode == "async":
        raise ConfigError("config: rollout.mode = \"async\" under torchrun is not supported yet: each rank runs "
                          "the synchronous loop on its share of the groups (use mode = \"sync\", or one process)")
    if cfg.rl.data_parallel == "fsdp" and (cfg.train.checkpoint_every or cfg.rl.kl_beta > 0):
        raise ConfigError("config: rl.data_parallel = \"fsdp\" does not checkpoint the sharded optimizer state or "
                          "shard the KL reference yet: set train.checkpoint_every = 0 and rl.kl_beta = 0, or use \"ddp\"")
    rl = cfg.rl.model_copy(update={"device": device_for(cfg.rl.device, dp.local_rank)})
    engine = cfg.engine.model_copy(update={"device": device_for(cfg.engine.device, dp.local_rank)})
    return cfg.model_copy(update={"rl": rl, "engine": engine})


def build_held_out(evaluation: EvalConfig, domains: list[Domain], seed: int) -> tuple[list[Suite], list[Suite]]:
    """Each domain's `eval.size` held-out tasks, drawn with the run's `seed` (fewer when its split is smaller),
    split by a hash of the task id into the selection part (evaluated during training; selects best/) and the reporting part
    (evaluated at the end), both judged by the domain's verifier."""
    from posttrain.agent.spec import spec_of

    selection, reporting = [], []
    fraction = evaluation.selection_fraction
    for d in domains:
        agent = spec_of(d)
        tasks = d.held_out(evaluation.size, seed=seed)
        if not tasks:
            continue
        if fraction == 0:
            select, report = tasks, tasks
        else:
            # by the canonical problem, so `a+b` and `b+a` never land on both sides
            role = {t.id: split_of(f"select:{t.meta.get('split_key', t.id)}", fraction) for t in tasks}
            select = [t for t in tasks if role[t.id] == "held_out"]
            report = [t for t in tasks if role[t.id] == "train"]
        if select:
            selection.append(Suite(d.name, select, d.verifier, agent=agent,
                                   description=f"{len(select)} held-out {d.name} tasks (selection)"))
        if report:
            reporting.append(Suite(d.name, report, d.verifier, agent=agent,
                                   description=f"{len(report)} held-out {d.name} tasks (reporting)"))
    return selection, reporting


def build_eval_suites(evaluation: EvalConfig) -> dict[str, Suite]:
    """`eval.suites`, each the registry's own domain view (its own verifier), loaded at start-up."""
    return {f"suite:{spec}": load_domain(spec).suite(limit=evaluation.suite_limit) for spec in evaluation.suites}


def build(cfg: RunConfig, store: bool = True, dp: DataParallel | None = None,
          backends: Backends | None = None) -> Components:
    """Every component of the run `cfg` describes (the store opened at `<run>/run.sqlite` when `store`); `dp`:
    this rank (`OneProcess` by default); `backends`: the optional back ends the wiring layer supplies
    (`posttrain.wiring.default_backends`), needed only when the config names one."""
    import copy

    import torch

    ranks: DataParallel = dp or OneProcess()
    backends = backends or Backends()
    if ranks.world > 1:
        cfg = for_rank(cfg, ranks)
    torch.manual_seed(cfg.seed)
    model, tokenizer, init_path, base = build_policy(cfg, ranks)
    domains = build_domains(cfg)
    # FSDP shards the learner's module, which then only runs in step on every rank: each rank's engine samples
    # from a whole copy that takes the gathered weights after each update (bitwise the policy: no correction)
    sharded = ranks.world > 1 and cfg.rl.data_parallel == "fsdp"
    whole = copy.deepcopy(model) if sharded else model
    seed = cfg.seed + RANK_SEED_STRIDE * ranks.rank
    engine, shares = build_engine_for(cfg.engine, whole, tokenizer, seed)
    params = sampling_params(cfg, domains)
    check_answer_room(domain_rooms(domains, [params.max_tokens] * len(domains), tokenizer, cfg.seed))
    renderer = build_prompt_renderer(cfg.model, tokenizer)
    selection, reporting = build_held_out(cfg.eval, domains, cfg.seed)
    sandboxes = build_sandboxes(cfg, backends)
    try:
        return Components(
            cfg=cfg,
            model=model,
            tokenizer=tokenizer,
            init_path=init_path,
            engine=engine,
            shares_weights=shares,
            domains=domains,
            params=params,
            rollouter=build_rollouter(cfg, engine, domains, params, sandboxes, renderer=renderer),
            curriculum=(build_task_scheduler(cfg, domains) if cfg.train.curriculum == "scheduler"
                        else build_curriculum(domains, cfg.seed, cfg.train.curriculum, cfg.train.signal_from)),
            learner=build_learner(cfg, model, params.max_tokens, shares, ranks, backends),
            held_out=selection,
            reporting=reporting,
            eval_suites=build_eval_suites(cfg.eval),
            store=RunStore(cfg.path / "run.sqlite") if store else None,
            base=base,
            sandboxes=sandboxes,
            dp=ranks,
            backends=backends,
            whole_model=whole,
            renderer=renderer,
        )
    except BaseException:  # a Ray pool's actors would outlive a failed build
        sandboxes.close()
        raise
