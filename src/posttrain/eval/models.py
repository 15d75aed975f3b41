"""What `--model M` names, turned into an engine.

Covers: `builtin` (the built-in tiny base model, built or found in the
cache), an HF-format checkpoint directory, a training run directory
(its `final/` model, or `RUN@STEP` for a stored checkpoint), and an
http(s) URL of an OpenAI-compatible server (`URL#served-model-name`; the
name defaults to the server's first listed model).
Does not cover: generation itself (the engines do that).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from posttrain.tasks.jsonl import TaskFileError


class ModelSpecError(TaskFileError):
    """A `--model` value that names nothing usable (a user error: one line, exit 2)."""


@dataclass
class ResolvedModel:
    engine: Any
    label: str  # what results are filed under: the spec as given
    info: dict[str, Any]  # where the weights came from (path, step, url)


def _run_checkpoint(run_dir: Path, step: str | None) -> tuple[Path, int | None]:
    from posttrain.rl.checkpoint import list_checkpoints

    found = dict(list_checkpoints(run_dir))
    if step is None:
        if (run_dir / "final" / "config.json").exists():
            return run_dir / "final", None
        if found:
            last = max(found)
            return found[last], last
        raise ModelSpecError(f"run {run_dir} has no final/ model and no checkpoints")
    try:
        wanted = int(step)
    except ValueError:
        raise ModelSpecError(f"--model {run_dir}@{step}: the step must be an integer") from None
    if wanted not in found:
        have = ", ".join(str(s) for s in sorted(found)) or "none"
        raise ModelSpecError(f"run {run_dir} has no checkpoint at step {wanted} (stored: {have})")
    return found[wanted], wanted


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
        from posttrain.engine.remote.openai_engine import (
            OpenAIEngine,  # lazy: only endpoint evals need httpx
        )

        url, _, name = spec.partition("#")
        opts = dict(engine_options or {})
        name = name or _served_model(url, opts.get("transport"))
        return ResolvedModel(OpenAIEngine(url, name, seed=seed, **opts), spec, {"url": url, "served_model": name})

    from posttrain.engine.local import LocalEngine
    from posttrain.models.io import load_model

    if spec == "builtin":
        from posttrain.builtin import ensure_base
        from posttrain.config import BaseModelConfig

        path, step = ensure_base(BaseModelConfig()).path, None
    else:
        base, _, step_text = spec.rpartition("@") if "@" in spec else (spec, "", "")
        path = Path(base)
        if not path.exists():
            raise ModelSpecError(f"--model {spec}: no such directory (use a checkpoint dir, a run dir[@step], builtin or a URL)")
        step = None
        if (path / "run.sqlite").exists():
            path, step = _run_checkpoint(path, step_text or None)
        elif step_text:
            raise ModelSpecError(f"--model {spec}: @step needs a training run directory (one with run.sqlite)")
        elif not (path / "config.json").exists():
            raise ModelSpecError(f"--model {spec}: not a checkpoint (no config.json) nor a run directory (no run.sqlite)")
    model, tokenizer = load_model(path)
    return ResolvedModel(LocalEngine(model, tokenizer, seed=seed), spec, {"path": str(path), "step": step})
