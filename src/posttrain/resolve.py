"""What a model spec names, turned into weights on disk or an engine: the one resolver every command uses.

Covers: `builtin` (the built-in tiny base model, built or found in the
cache, from the default `model.base` settings or the ones given), an
HF-format checkpoint directory, a training run directory (its `best/` model
when held-out selection kept one, else `final/`, else its newest
checkpoint; `RUN@STEP` for a stored checkpoint), and an http(s) URL of an
OpenAI-compatible server (`URL#served-model-name`; the name defaults to
the server's first listed model). `locate_model` gives local weights (the
trainer); `resolve_model` an engine (`posttrain eval`); `load_served_model`
an engine with the checkpoint's chat template (`posttrain serve`).
Does not cover: generation itself (the engines) or building the base model
(`posttrain.recipes.builtin`, the recipe this resolver calls).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from posttrain.errors import UserError


class ModelSpecError(UserError, ValueError):
    """A model spec that names nothing usable (a user error: one line, exit 2)."""


@dataclass
class ModelLocation:
    """Local weights a spec names, and how they were found."""

    path: Path
    step: int | None = None  # the training step of a run's checkpoint (None: final/ or not a run)
    note: str = ""  # said to the user when the choice is not obvious ("runs/x: best/ (step 250)")
    base: Any = None  # the `BaseBuild` when the spec was `builtin`


@dataclass
class ResolvedModel:
    engine: Any  # a `posttrain.engine.Engine`
    label: str  # what results are filed under: the spec as given
    info: dict[str, Any] = field(default_factory=dict)  # where the weights came from (path, step, url)
    renderer: Any = None  # the `PromptRenderer` it is prompted through (None: raw; a server applies its own template)


def _run_checkpoint(run_dir: Path, step: str | None) -> ModelLocation:
    from posttrain.store.checkpoints import list_checkpoints

    found = dict(list_checkpoints(run_dir))
    if step is None:
        best = run_dir / "best"
        if (best / "config.json").exists():
            saved = _saved_step(best)
            at = f"step {saved}, " if saved is not None else ""
            final = f"; --model {run_dir / 'final'} for the last step's" if (run_dir / "final" / "config.json").exists() else ""
            return ModelLocation(best, saved, f"{run_dir}: its best/ model ({at}selected on held-out problems{final})")
        if (run_dir / "final" / "config.json").exists():
            return ModelLocation(run_dir / "final", None)
        if found:
            last = max(found)
            return ModelLocation(found[last], last, f"{run_dir}: no final/ model, using its newest checkpoint (step {last})")
        raise ModelSpecError(f"run {run_dir} has no final/ model and no checkpoints")
    try:
        wanted = int(step)
    except ValueError:
        raise ModelSpecError(f"{run_dir}@{step}: the step must be an integer") from None
    if wanted not in found:
        have = ", ".join(str(s) for s in sorted(found)) or "none"
        raise ModelSpecError(f"run {run_dir} has no checkpoint at step {wanted} (stored: {have})")
    return ModelLocation(found[wanted], wanted)


def _saved_step(path: Path) -> int | None:
    import json

    try:
        return int(json.loads((path / "posttrain.json").read_text())["step"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def locate_model(
    spec: str, base: Any = None, on_base_eval: Callable[[int, float], None] | None = None
) -> ModelLocation:
    """The local weights `spec` names; `base` is the `BaseModelConfig` for `builtin` (default settings if None)."""
    if spec.startswith(("http://", "https://")):
        raise ModelSpecError(f"{spec}: a server's URL has no local weights (it evaluates, it does not train or serve)")
    if spec == "builtin":
        from posttrain.config import BaseModelConfig
        from posttrain.recipes.builtin import ensure_base

        build = ensure_base(base if base is not None else BaseModelConfig(), on_eval=on_base_eval)
        return ModelLocation(build.path, None, base=build)
    root, _, step_text = spec.rpartition("@") if "@" in spec else (spec, "", "")
    path = Path(root)
    if not path.exists():
        raise ModelSpecError(f"{spec}: not a checkpoint directory (no such directory; use a checkpoint dir, "
                             "a run dir[@step], builtin or a URL)")
    if (path / "run.sqlite").exists():
        return _run_checkpoint(path, step_text or None)
    if step_text:
        raise ModelSpecError(f"{spec}: @step needs a training run directory (one with run.sqlite)")
    if not (path / "config.json").exists():
        raise ModelSpecError(f"{spec}: not a checkpoint (no config.json) nor a run directory (no run.sqlite)")
    return ModelLocation(path, None)


def _served_model(url: str, transport: Any = None) -> str:
    import httpx

    try:
        with httpx.Client(transport=transport, timeout=10.0) as client:
            data = client.get(url.rstrip("/") + "/models").json().get("data") or []
    except Exception as exc:  # noqa: BLE001 - any failure here is the user's endpoint being unreachable
        raise ModelSpecError(f"cannot list models at {url}: {exc}; name one with {url}#MODEL") from None
    if not data:
        raise ModelSpecError(f"{url}/models lists no models; name one with {url}#MODEL")
    return data[0]["id"]


def resolve_model(spec: str, seed: int = 0, engine_options: dict[str, Any] | None = None) -> ResolvedModel:
    """The engine `spec` names; a spec naming nothing raises `ModelSpecError` with the reason."""
    if spec.startswith(("http://", "https://")):
        from posttrain.engine import OpenAIEngine  # lazy: only endpoint evals need httpx

        url, _, name = spec.partition("#")
        opts = dict(engine_options or {})
        name = name or _served_model(url, opts.get("transport"))
        return ResolvedModel(OpenAIEngine(url, name, seed=seed, **opts), spec, {"url": url, "served_model": name})
    from posttrain.config import EngineConfig
    from posttrain.engine.build import build_engine
    from posttrain.models.io import load_model

    where = locate_model(spec)
    model, tokenizer = load_model(where.path)
    info: dict[str, Any] = {"path": str(where.path), "step": where.step}
    if where.note:
        info["note"] = where.note
    engine_cfg = EngineConfig(**(engine_options or {}))
    renderer = renderer_for(spec, where.path, tokenizer)
    info["prompt_format"] = renderer.mode
    return ResolvedModel(build_engine(engine_cfg, model, tokenizer, seed), spec, info, renderer)


def run_config(spec: str) -> Any:
    """The `RunConfig` a training run directory (`RUN` or `RUN@STEP`) was trained with; None for anything else.
    A stored config that no longer validates (a run from before a new check) is a one-line `ModelSpecError`."""
    from pydantic import ValidationError

    from posttrain.config import ConfigDeprecation, RunConfig
    from posttrain.store.run_store import RunStore

    root = Path(spec.rpartition("@")[0] if "@" in spec else spec)
    if not (root / "run.sqlite").exists():
        return None
    with RunStore(root / "run.sqlite", readonly=True) as store:
        raw = store.info().get("config")
    if not raw:
        return None
    try:
        with warnings.catch_warnings():  # a stored config's keys at their old places are no note for its reader
            warnings.simplefilter("ignore", ConfigDeprecation)
            return RunConfig.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ModelSpecError(f"{root}: its stored config does not validate today ({where}: {first['msg']}); "
                             "evaluate it with --suite") from None


def renderer_for(spec: str, checkpoint: Path, tokenizer: Any) -> Any:
    """The `PromptRenderer` of the weights `spec` names: a run's own prompt format and system prompt (what it was
    trained on), else the checkpoint's template when it ships one (`prompt_format = "auto"`)."""
    from posttrain.engine.prompt_format import build_renderer

    try:
        cfg = run_config(spec)
    except ModelSpecError:  # an old run's config: its checkpoint is still prompted by what it ships
        cfg = None
    if cfg is None:
        return build_renderer(checkpoint, tokenizer)
    return build_renderer(checkpoint, tokenizer, cfg.model.prompt_format, cfg.model.system_prompt)


@dataclass
class ServedModel:
    """What `posttrain serve MODEL` serves: an engine, the chat template of its checkpoint, the model id."""

    engine: Any
    template: Any  # a `posttrain.engine.chat.ChatTemplate`
    name: str
    note: str = ""
    renderer: Any = None  # the `PromptRenderer` (system prompt, end-of-turn stops) training and evaluation use


def load_served_model(model: str, seed: int = 0, fast: bool = False, draft: str | None = None) -> ServedModel:
    """The model `posttrain serve MODEL` names: `builtin`, a checkpoint directory, or a run (best/ or final/);
    `fast`: the high-speed mode (int8 weights and prompt-lookup speculation, `posttrain serve --fast`);
    `draft`: a draft model's checkpoint (`posttrain draft`) that proposes for speculative decoding instead
    (the output distribution stays the served model's)."""
    from posttrain.config import EngineConfig
    from posttrain.engine.build import build_engine
    from posttrain.engine.chat import ChatTemplate
    from posttrain.engine.local.spec_decode import SpecConfig
    from posttrain.models.io import load_model

    where = locate_model(model)
    net, tokenizer = load_model(where.path)
    name = "builtin" if model == "builtin" else Path(model.rpartition("@")[0] or model).resolve().name
    spec = SpecConfig() if fast else None
    if draft is not None:
        drafter, _ = load_model(locate_model(draft).path)
        if drafter.config.vocab_size != net.config.vocab_size:
            raise UserError(f"--draft {draft}: its vocabulary ({drafter.config.vocab_size}) is not the model's "
                            f"({net.config.vocab_size}); a draft must share the served model's tokenizer")
        spec = SpecConfig("draft", draft_model=drafter)
    engine = build_engine(EngineConfig(precision="int8") if fast else None, net, tokenizer, seed, spec)
    renderer = renderer_for(model, where.path, tokenizer)
    # a raw-format model is served through the plain template: messages joined as its raw prompts were
    template = renderer.template if renderer.mode == "chat" else ChatTemplate.plain()
    return ServedModel(engine, template, name, where.note, renderer)
