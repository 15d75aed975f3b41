"""Commands of the `engine` package, mounted on the `posttrain` app by `register`.

Covers: `posttrain serve MODEL`, the OpenAI-compatible server over a
checkpoint directory (or `builtin`, the built-in tiny model).
Does not cover: the server itself (`server.py`).
"""

from __future__ import annotations

from typing import Annotated

import typer


def load_served_model(model: str, seed: int = 0):
    """(LocalEngine, ChatTemplate, default name) for a checkpoint dir or `builtin`."""
    from pathlib import Path

    from posttrain.engine.chat import ChatTemplate
    from posttrain.engine.local import LocalEngine
    from posttrain.models.io import load_model

    if model == "builtin":
        from posttrain.builtin import ensure_base
        from posttrain.config import load_config

        path = ensure_base(load_config(None, []).model.base).path
        name = "builtin"
    else:
        path = Path(model)
        if not path.is_dir():
            from posttrain.cli import UserError

            raise UserError(f"{model}: not a checkpoint directory (expected config.json, model.safetensors, tokenizer.json), nor 'builtin'")
        name = path.resolve().name
    net, tokenizer = load_model(path)
    return LocalEngine(net, tokenizer, seed=seed), ChatTemplate.from_checkpoint(path), name


def register(app: typer.Typer) -> None:
    """Add this package's commands to the top-level app (imports stay lazy inside each command)."""

    @app.command()
    def serve(
        model: Annotated[str, typer.Argument(help="A checkpoint directory (HF format), or 'builtin' for the built-in tiny model.")],
        host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
        port: Annotated[int, typer.Option(help="TCP port.")] = 8000,
        max_concurrency: Annotated[int, typer.Option(help="Most requests in the engine at once; more wait their turn.")] = 64,
        name: Annotated[str | None, typer.Option(help="Model id clients send (default: the directory's name, or 'builtin').")] = None,
        max_tokens: Annotated[int, typer.Option(help="Default max_tokens for chat requests that set none.")] = 256,
        seed: Annotated[int, typer.Option(help="Seed of the engine's sampler (requests may also send their own seed).")] = 0,
    ) -> None:
        """Serve a model over an OpenAI-compatible HTTP API (/v1/chat/completions, /v1/completions, /v1/models)."""
        from posttrain.cli import UserError, _friendly, err

        with _friendly():
            from posttrain.engine.extras import MissingExtraError
            from posttrain.engine.serve.server import (
                ServeConfig,
                create_app,
                require_serve_extra,
            )

            try:
                require_serve_extra()
            except MissingExtraError as exc:
                raise UserError(str(exc)) from None
            if max_concurrency < 1:
                raise UserError(f"--max-concurrency must be >= 1, got {max_concurrency}")
            import socket

            import uvicorn

            with socket.socket() as probe:  # a busy port is the user's problem to fix, said in one line
                try:
                    probe.bind((host, port))
                except OSError as exc:
                    raise UserError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
            engine, template, default_name = load_served_model(model, seed)
            served = name or default_name
            config = ServeConfig(model_name=served, max_concurrency=max_concurrency, default_max_tokens=max_tokens)
            app = create_app(engine, config, template)
            kind = "plain" if template.is_plain else "the checkpoint's"
            err.print(f"serving [bold]{served}[/] at http://{host}:{port}/v1 ({kind} chat template); Ctrl-C stops")
            uvicorn.run(app, host=host, port=port, log_level="warning")
