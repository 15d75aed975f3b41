"""`posttrain export MODEL OUT.gguf`: a checkpoint (a directory, a run's best/ or @step, or `builtin`) as one GGUF
file that llama.cpp loads.

Covers: the command's options, resolving MODEL the way `serve` and `eval` do (`resolve.locate_model`), and the
one-line errors a user can act on (no such checkpoint, a model GGUF cannot express, the `gguf` extra missing).
Does not cover: the writer (`models/gguf_export.py`), other export formats (a checkpoint directory is already
HF-format safetensors).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from posttrain.cli.common import err, friendly, out


def export(
    model: Annotated[str, typer.Argument(help="A checkpoint directory, a run dir[@step] (best/ by default), or 'builtin'.")],
    output: Annotated[Path, typer.Argument(help="The GGUF file to write.")],
    dtype: Annotated[str, typer.Option(help="f32 (exact weights) or q8_0 (llama.cpp's 8-bit blocks).")] = "f32",
) -> None:
    """Write a model as one GGUF file for llama.cpp (native Llama models with the built-in tokenizer)."""
    with friendly():
        from posttrain.errors import UserError
        from posttrain.models import load_model
        from posttrain.models.gguf_export import GGUF_DTYPES, export_gguf, require_gguf
        from posttrain.resolve import locate_model

        if dtype not in GGUF_DTYPES:
            raise UserError(f"--dtype must be one of {', '.join(GGUF_DTYPES)}; got {dtype!r}")
        require_gguf()  # before any model is built: the missing extra is the first thing to say
        where = locate_model(model)
        if where.note:
            err.print(escape(where.note), highlight=False, soft_wrap=True)
        native, tokenizer = load_model(where.path)
        output.parent.mkdir(parents=True, exist_ok=True)
        path = export_gguf(native, tokenizer, output, dtype=dtype, name=where.path.name)
        size_mb = path.stat().st_size / 1e6
        out.print(f"wrote {escape(str(path))} ({dtype}, {size_mb:.1f} MB) from {escape(str(where.path))}",
                  highlight=False, soft_wrap=True)
