"""`posttrain serve MODEL`: the OpenAI-compatible server over a checkpoint directory (or `builtin`, the built-in tiny model).

Covers: the command's options and the checks a user can act on before the server starts (the `serve` extra,
a busy port, a path that is no checkpoint), each one line with exit code 2.
Does not cover: the server itself (`engine/serve/server.py`) or what MODEL names (`resolve.py`, `load_served_model`).
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape

from posttrain.cli.common import err, friendly
from posttrain.errors import UserError


def serve(
    model: Annotated[str, typer.Argument(help="A checkpoint directory (HF format), or 'builtin' for the built-in tiny model.")],
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.")] = 8000,
    max_concurrency: Annotated[int, typer.Option(help="Most requests in the engine at once; more wait their turn.")] = 64,
    name: Annotated[str | None, typer.Option(help="Model id clients send (default: the directory's name, or 'builtin').")] = None,
    max_tokens: Annotated[int, typer.Option(help="Default max_tokens for chat requests that set none.")] = 256,
    seed: Annotated[int, typer.Option(help="Seed of the engine's sampler (requests may also send their own seed).")] = 0,
    fast: Annotated[
        bool,
        typer.Option(
            help="High-speed mode: int8 weights (per-channel scales; activations and KV stay fp32) plus prompt-lookup "
            "speculative decoding. Faster batch-1 decoding on a CPU; outputs are the int8 model's, a small "
            "accuracy cost measured in benchmarks/fast.py (docs/serving.md)."
        ),
    ] = False,
    draft: Annotated[
        str | None,
        typer.Option(help="A draft model's checkpoint (`posttrain draft`) proposing tokens for speculative decoding; "
                     "outputs keep the served model's distribution exactly."),
    ] = None,
) -> None:
    """Serve a model over an OpenAI-compatible HTTP API (/v1/chat/completions, /v1/completions, /v1/models)."""
    with friendly():
        from posttrain.engine.serve.server import ServeConfig, create_app, require_serve_extra
        from posttrain.resolve import load_served_model

        require_serve_extra()  # a MissingExtraError (a UserError) names the pip command
        if max_concurrency < 1:
            raise UserError(f"--max-concurrency must be >= 1, got {max_concurrency}")
        import socket

        import uvicorn

        with socket.socket() as probe:  # a busy port is the user's problem to fix, said in one line
            try:
                probe.bind((host, port))
            except OSError as exc:
                raise UserError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
        served = load_served_model(model, seed, fast=fast, draft=draft)
        if served.note:  # a run's best/ (or its newest checkpoint) was chosen: say which
            err.print(escape(served.note), highlight=False, soft_wrap=True)
        model_name = name or served.name
        config = ServeConfig(model_name=model_name, max_concurrency=max_concurrency, default_max_tokens=max_tokens)
        app = create_app(served.engine, config, served.template, served.renderer)
        kind = "plain" if served.template.is_plain else "the checkpoint's"
        mode = ", high-speed mode: int8 + speculation" if fast else ""
        mode += f", speculation with the draft {draft}" if draft else ""
        err.print(f"serving [bold]{model_name}[/] at http://{host}:{port}/v1 ({kind} chat template{mode}); Ctrl-C stops")
        uvicorn.run(app, host=host, port=port, log_level="warning")
