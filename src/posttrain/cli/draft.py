"""`posttrain draft MODEL OUT`: distil a draft model for speculative decoding (`posttrain serve MODEL --draft OUT`).

Covers: the command's options, resolving MODEL the way `serve` and `eval` do, the draft's starting point
(a checkpoint with the same tokenizer, or a fresh small Llama of the given shape), training prompts from a
domain's train split and held-out prompts from its held-out split, and the one-line errors a user can act on.
Does not cover: the distillation itself (`recipes/distill.py`) or the proposer (`engine/local/spec_decode.py`).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from posttrain.cli.common import err, friendly, out


def draft(
    model: Annotated[str, typer.Argument(help="The target: a checkpoint directory, a run dir[@step], or 'builtin'.")],
    output: Annotated[Path, typer.Argument(help="Directory to write the draft checkpoint to.")],
    tasks: Annotated[str, typer.Option(help="Domain whose train-split prompts the target continues "
                                       "(posttrain tasks list).")] = "arith:add",
    start: Annotated[str | None, typer.Option("--from", help="Start the draft from this checkpoint (same tokenizer) "
                                              "instead of a fresh model.")] = None,
    hidden: Annotated[int, typer.Option(help="A fresh draft's width.")] = 128,
    layers: Annotated[int, typer.Option(help="A fresh draft's decoder layers.")] = 2,
    prompts: Annotated[int, typer.Option(help="Training prompts (the target continues each once).")] = 2048,
    steps: Annotated[int, typer.Option(help="Distillation updates.")] = 300,
    temperature: Annotated[float, typer.Option(help="The target samples at it and the KL is taken at it: serve at it.")] = 1.0,
    max_new_tokens: Annotated[int, typer.Option(help="Longest continuation sampled per prompt.")] = 64,
    seed: Annotated[int, typer.Option(help="Seed of the prompts, the samples and a fresh draft's weights.")] = 0,
) -> None:
    """Distil a small draft model from MODEL's own continuations, for speculative decoding (`serve --draft`)."""
    with friendly():
        import torch

        from posttrain.errors import UserError
        from posttrain.models import CausalLM, ModelConfig, load_model, save_model
        from posttrain.recipes.distill import DistillConfig, distill_draft
        from posttrain.resolve import locate_model
        from posttrain.tasks.domains import load_domain

        if prompts < 1 or steps < 1 or hidden < 8 or layers < 1:
            raise UserError("--prompts, --steps and --layers must be >= 1 and --hidden >= 8")
        try:
            cfg = DistillConfig(steps=steps, temperature=temperature, max_new_tokens=max_new_tokens, seed=seed)
        except ValueError as exc:
            raise UserError(str(exc)) from None
        where = locate_model(model)
        if where.note:
            err.print(escape(where.note), highlight=False, soft_wrap=True)
        target, tokenizer = load_model(where.path)
        if start is not None:
            drafted, _ = load_model(locate_model(start).path)
        else:
            t = target.config
            heads = max(1, hidden // 32)
            drafted = CausalLM(ModelConfig(vocab_size=t.vocab_size, hidden_size=hidden, intermediate_size=3 * hidden,
                                           num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=heads,
                                           max_position_embeddings=t.max_position_embeddings, tie_word_embeddings=True))
            drafted.init_weights(torch.Generator().manual_seed(seed))
        if drafted.config.vocab_size != target.config.vocab_size:
            raise UserError(f"--from {start}: its vocabulary ({drafted.config.vocab_size}) is not the target's "
                            f"({target.config.vocab_size}); a draft must share its target's tokenizer")
        source = load_domain(tasks).source
        rng = random.Random(seed)
        train = [source.sample(rng, "train").prompt for _ in range(prompts)]
        held = [source.sample(rng, "held_out").prompt for _ in range(max(16, min(256, prompts // 8)))]
        n_target = sum(p.numel() for p in target.parameters()) / 1e6
        n_draft = sum(p.numel() for p in drafted.parameters()) / 1e6
        err.print(f"distilling a {n_draft:.3g}M draft from the {n_target:.3g}M target on {len(train)} {tasks} prompts")
        report = distill_draft(target, drafted, tokenizer, train, held, cfg,
                               on_step=lambda s, loss: s % 50 == 0 and err.print(f"  step {s}: KL {loss:.4f}"))
        save_model(drafted, tokenizer, output)
        out.print(f"draft written to {escape(str(output))}: expected acceptance per token "
                  f"{report.before.expected:.3f} -> {report.after.expected:.3f}, greedy agreement "
                  f"{report.before.greedy:.3f} -> {report.after.greedy:.3f} on {len(held)} held-out prompts "
                  f"({report.sample_seconds:.0f} s sampling, {report.train_seconds:.0f} s training); "
                  f"serve with: posttrain serve {escape(model)} --draft {escape(str(output))}")
