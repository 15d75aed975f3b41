"""Domains and the one spec registry: what a spec names, for training and for evaluation alike.

Covers: `Domain` (a name, a `TaskSource` to train from, the verifier that
judges its responses, a weight among domains, sampling defaults such as the
completion length its answers need, and its evaluation view);
`register_domain` (a decorator for factories), `list_domains`,
`load_domain(spec, **options)` where a spec is a registered name
(`humaneval`), a registered family with an argument after a colon
(`arith:add`, `code:ops`, `rg:leg_counting`), or a path to a `.jsonl` file;
and `parse_options` for `KEY=VALUE` option lists. A suite is a domain's
held-out view (`Domain.suite()`), so training rewards and `posttrain eval`
judge with the same verifier object, built once from the same spec.
The built-in entries here are the arithmetic generators and JSONL files;
the others are `DomainPlugin`s handed in by the wiring layer (`add_plugins`: `posttrain/wiring.py:
register_domains`, which the package's root leaves in `posttrain/hooks.py` for the registry to run before it
is first read), each loaded on first use: this package names no module above it.
Does not cover: which domain or task to train on next (the curriculum and
the scheduler), or running an evaluation (`posttrain.eval`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from posttrain import hooks
from posttrain.tasks.base import TaskSource
from posttrain.tasks.jsonl import ListSource, TaskFileError, load_jsonl
from posttrain.tasks.suites import Suite
from posttrain.types import Task


@dataclass(frozen=True)
class SamplingDefaults:
    """What a domain's answers need from the sampler, for training and evaluation alike."""

    max_tokens: int = 256
    stop: tuple[str, ...] = ()


EvalView = Callable[[int | None, int], list[Task]]  # (limit, seed) -> the tasks an evaluation of the domain runs


@dataclass
class Domain:
    """A family of tasks with its acceptance criteria.

    `source` is what training samples (its train split); `evaluation(limit,
    seed)` the fixed task list an evaluation runs (its held-out split, or a
    fixed benchmark list such as HumanEval's 164). `verifier` judges both.
    """

    name: str
    source: TaskSource
    verifier: Any  # a `posttrain.rewards.Verifier`
    evaluation: EvalView
    weight: float = 1.0
    sampling: SamplingDefaults = field(default_factory=SamplingDefaults)
    rollouter: str = "single_turn"  # "agent": tasks run as episodes, by `agent`
    agent: Any = None  # a `posttrain.agent.spec.AgentSpec` when `rollouter == "agent"`
    description: str = ""
    meta: dict[str, Any] = field(default_factory=dict)  # options it was built with, source versions
    eval_limit: int | None = None  # the `limit` option: tasks in the default evaluation view
    eval_seed: int = 0

    def held_out(self, n: int, seed: int = 0) -> list[Task]:
        """n distinct held-out tasks of the training source (the trainer's held-out set)."""
        return self.source.take(n, "held_out", seed=seed)

    def suite(self, limit: int | None = None, seed: int | None = None) -> Suite:
        """The domain's evaluation view as a `Suite`: its tasks and its verifier."""
        tasks = self.evaluation(limit if limit is not None else self.eval_limit, self.eval_seed if seed is None else seed)
        return Suite(self.name, tasks, self.verifier, description=self.description, meta=dict(self.meta),
                     agent=self.agent)

    def with_verifier(self, verifier: Any) -> "Domain":
        """The same domain judged by another verifier (a config's `reward.verifier` override)."""
        return replace(self, verifier=verifier)


DomainFactory = Callable[..., Domain]


Members = Callable[[bool], list[str]]  # (only those with difficulty levels) -> a family's member names
LevelConfig = Callable[[str, int, dict[str, Any]], Any]  # (member, level, options) -> what the level configures


@dataclass(frozen=True)
class _Entry:
    name: str  # "humaneval", or a family "rg:" whose factory takes the part after the colon
    factory: DomainFactory
    description: str
    family: bool
    knob: str | None = None  # the option that sets difficulty (`digits`, `level`, `hops`), for levels and the band
    members: Members | None = None  # a family's members, for globs in `[[domains]]` (`rg:*`)
    level_config: LevelConfig | None = None  # equal for two levels of a member that give the same tasks (None: all differ)


@dataclass(frozen=True)
class DomainPlugin:
    """Domains registered by code outside this module: the names and `family:` prefixes it registers, and the
    function that registers them (it imports a module whose factories carry `@register_domain`). Loaded the
    first time one of its names is asked for, or when the whole registry is read, so that loading one domain
    loads only its own plugin (`posttrain eval --suite humaneval` need not import the agent runtime)."""

    names: tuple[str, ...]
    load: Callable[[], object]


_REGISTRY: dict[str, _Entry] = {}
_plugins: list[DomainPlugin] = []  # handed in by the wiring layer (`add_plugins`)
_loaded: set[DomainPlugin] = set()


def register_domain(name: str, description: str, knob: str | None = None, members: Members | None = None,
                    level_config: LevelConfig | None = None) -> Callable[[DomainFactory], DomainFactory]:
    """Register a domain factory. A name ending in ':' is a family: `factory(arg, **options)` for `name + arg`.
    `knob`: the option that sets its difficulty; `members(leveled)`: a family's member names (those that take
    the knob, when `leveled`), so that `[[domains]]` globs and `levels` can expand it (`tasks/expand.py`);
    `level_config(member, level, options)`: what a level configures, equal for two levels that give the same tasks
    (reasoning-gym's levels past a generator's last are its last), so an expansion keeps only the first of them.

    >>> @register_domain("tiny", "two additions")
    ... def tiny(**options):
    ...     tasks = [Task("a", "1+1=", "2"), Task("b", "2+2=", "4")]
    ...     return Domain("tiny", ListSource(tasks), ExactMatch(), lambda limit, seed: tasks[:limit])
    """

    def decorate(factory: DomainFactory) -> DomainFactory:
        _REGISTRY[name] = _Entry(name, factory, description, family=name.endswith(":"), knob=knob, members=members,
                                 level_config=level_config)
        return factory

    return decorate


def add_plugins(plugins: Iterable[DomainPlugin]) -> None:
    """Hand the registry plugins it loads on first use (the wiring layer does, for every built-in domain)."""
    _plugins.extend(p for p in plugins if p not in _plugins)


def plugins() -> list[DomainPlugin]:
    """The plugins handed in, in order."""
    _wire()
    return list(_plugins)


def _wire() -> None:
    """Run, once each, what the wiring layer left for this registry (`posttrain/hooks.py`)."""
    for hook in list(hooks.domains):  # removed after it ran: a thread reading meanwhile runs it too (idempotent)
        hook()
        if hook in hooks.domains:
            hooks.domains.remove(hook)


def _load(plugin: DomainPlugin) -> None:
    if plugin not in _loaded:
        plugin.load()
        _loaded.add(plugin)


def _load_plugins() -> None:
    _wire()
    for plugin in list(_plugins):
        _load(plugin)


def list_domains() -> list[tuple[str, str]]:
    """(name, description) of every registered domain; families are shown as `prefix:<name>`."""
    _load_plugins()
    return sorted((e.name + "<name>" if e.family else e.name, e.description) for e in _REGISTRY.values())


def registry_entries() -> list[_Entry]:
    """Every registered name and family with its difficulty knob and members (`tasks/expand.py` reads them)."""
    _load_plugins()
    return sorted(_REGISTRY.values(), key=lambda e: e.name)


def load_domain(spec: str, **options: Any) -> Domain:
    """The domain a spec names; unknown names fail with the list of known ones, bad options with the
    allowed ones. `limit` (tasks in the evaluation view) is understood by every domain."""
    name = spec if ":" not in spec else spec.split(":", 1)[0] + ":"
    _wire()
    for plugin in [p for p in _plugins if name in p.names and name not in _REGISTRY]:
        _load(plugin)
    if name not in _REGISTRY:
        _load_plugins()
    if spec in _REGISTRY and not _REGISTRY[spec].family:
        return _REGISTRY[spec].factory(**options)
    if ":" in spec:
        prefix, arg = spec.split(":", 1)
        entry = _REGISTRY.get(prefix + ":")
        if entry is not None:
            return entry.factory(arg, **options)
    path = Path(spec)
    if path.suffix == ".jsonl" or path.exists():
        return _jsonl_domain(path, **options)
    known = ", ".join(name for name, _ in list_domains())
    raise TaskFileError(f"unknown domain {spec!r}: known domains are {known}, or a path to a .jsonl file")


def parse_options(pairs: list[str] | None) -> dict[str, Any]:
    """`["size=50", "answer_format='tag'"]` -> options for `load_domain`; values are TOML literals, else strings."""
    if not pairs:
        return {}
    from posttrain.config import parse_literal  # here, not at the top: config imports pydantic (~0.1 s a command)

    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key.strip():
            raise TaskFileError(f"domain option {pair!r}: expected KEY=VALUE")
        options[key.strip()] = parse_literal(raw)
    return options


def reject_unknown(spec: str, options: dict[str, Any], allowed: tuple[str, ...]) -> None:
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise TaskFileError(f"{spec}: unknown option(s) {', '.join(unknown)}; allowed: {', '.join(allowed)}")


_ARITH_OPTIONS = ("digits", "min_digits", "held_out_fraction", "worked", "limit", "seed")


@register_domain("arith:", "built-in arithmetic (add, sub, addsub, mul, chain): exact match of the number", knob="digits",
                 members=lambda leveled: ["add", "sub", "addsub", "mul", "chain"])
def _arith_domain(family: str, **options: Any) -> Domain:
    from posttrain.rewards.verifiers import ExactMatch
    from posttrain.tasks.arithmetic import WORKED_FAMILIES, ArithmeticSource

    reject_unknown(f"arith:{family}", options, _ARITH_OPTIONS)
    digits = options.get("digits", 2)
    worked = options.get("worked", family in WORKED_FAMILIES)
    if not isinstance(worked, bool):
        raise TaskFileError(f"arith:{family}: option worked must be true or false, got {worked!r}")
    try:
        source = ArithmeticSource(
            family=family,  # type: ignore[arg-type]
            digits=digits,
            held_out_fraction=options.get("held_out_fraction", 0.15),
            min_digits=options.get("min_digits"),
            worked=worked,
        )
    except (TypeError, ValueError) as exc:
        raise TaskFileError(f"arith:{family}: {exc}") from None
    limit, seed = options.get("limit", 500), options.get("seed", 0)
    return Domain(
        f"arith:{family}",
        source,
        # a worked solution ends with the product: the verifier reads its last number
        ExactMatch(extract="last_number" if worked else "full"),
        evaluation=lambda n, s: source.take(500 if n is None else n, "held_out", seed=s),
        # the answer and EOS: a product of two d-digit numbers has at most 2d digits, plus a sign
        sampling=SamplingDefaults(max_tokens=source.max_solution_chars + 2 if worked else max(8, 2 * digits + 3)),
        description=f"held-out {digits}-digit {family} problems" + (" (worked solutions)" if worked else ""),
        meta={"family": family, "digits": digits, "limit": limit, "seed": seed, "worked": worked},
        eval_limit=limit,
        eval_seed=seed,
    )


_JSONL_OPTIONS = ("on_error", "held_out_fraction", "limit", "seed")


def _jsonl_domain(path: Path, **options: Any) -> Domain:
    """A user's JSONL file; each task's verifier comes from its `meta["verifier"]` (default: exact match).

    Without `held_out_fraction` every task is both trained on and evaluated (an evaluation file); with it,
    the file is split by a hash of each id and evaluations run the held-out part.
    """
    from posttrain.rewards.registry import PerTask

    reject_unknown(str(path), options, _JSONL_OPTIONS)
    tasks = load_jsonl(path, on_error=options.get("on_error", "fail"))
    fraction = options.get("held_out_fraction")
    source = ListSource(tasks, name=path.stem, held_out_fraction=fraction or 0.0)

    def evaluation(limit: int | None, seed: int) -> list[Task]:
        pool = source.split("held_out") if fraction else tasks
        return pool if limit is None else pool[:limit]

    limit = options.get("limit")
    return Domain(path.stem, source, PerTask(), evaluation, description=f"{len(tasks)} tasks from {path}",
                  meta={"path": str(path)}, eval_limit=limit, eval_seed=options.get("seed", 0))
