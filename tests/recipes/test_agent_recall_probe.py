"""The agent base's copy drills and the key-recall probe (`benchmarks/agent_recall_probe.py`) on a tiny budget: a drill's
one trained token is the value of the line the instruction's key names, the probe's accuracy counts a planted wrong
answer as wrong, and the probe runs to its end on a tiny model."""

import random
import re
import sys
from pathlib import Path

import pytest
import torch

from posttrain.config import BaseModelConfig
from posttrain.models.tokenizer import char_tokenizer
from posttrain.recipes.builtin import _copy_drills, drill_accuracy

ROOT = Path(__file__).resolve().parents[2]


def _lines_and_target(tok, ids, w):
    """Per drill: the key the instruction names, the file's lines as (key, value) pairs, and the trained token."""
    out = []
    for row, weight in zip(ids, w):
        text = tok.decode([i for i in row.tolist() if i != tok.pad_id])
        (scored,) = torch.nonzero(weight).flatten().tolist()  # exactly one trained token per drill
        key = re.search(r"Find the value of (\w\w)\.", text).group(1)
        body = text.split('<tool_response name="read">\n')[1].split("\n</tool_response>")[0]
        lines = [re.fullmatch(r"(\w\w) (?:->|=) (\w)", ln).groups() for ln in body.split("\n")]
        out.append((key, lines, tok.decode([int(row[scored + 1])])))
    return out


@pytest.mark.parametrize("near", [0.0, 1.0])
def test_a_three_line_drill_trains_only_the_value_of_the_instructions_key(near):
    tok = char_tokenizer()
    ids, w = _copy_drills(tok, random.Random(0), 64, lines=3, near=near)
    shared = 0
    for key, lines, target in _lines_and_target(tok, ids, w):
        assert len(lines) == 3 and [v for k, v in lines if k == key] == [target]  # the key's line, only one
        shared += sum(k[0] == key[0] or k[1] == key[1] for k, _ in lines if k != key)
    # near keys: every distractor shares a character with the key in its place; random keys: about 1 in 13 do
    assert shared == 128 if near else shared < 40


class _Fixed(torch.nn.Module):
    """A fake model predicting a fixed token at every position: `pred` [B, T-1] (the guess of ids[:, 1:])."""

    def __init__(self, pred: torch.Tensor, vocab: int):
        super().__init__()
        self.pred, self.vocab = pred, vocab

    def forward(self, ids: torch.Tensor) -> torch.Tensor:  # [B, T] -> [B, T, V]
        logits = torch.nn.functional.one_hot(self.pred[: len(ids)], self.vocab).float()
        return torch.cat([logits, logits[:, -1:]], dim=1)


def test_drill_accuracy_scores_the_gold_answer_right_and_a_distractors_value_wrong():
    tok = char_tokenizer()
    ids, w = _copy_drills(tok, random.Random(1), 16, lines=3)
    gold = ids[:, 1:].clone()
    assert drill_accuracy(_Fixed(gold, tok.vocab_size), ids, w) == 1.0
    planted = gold.clone()
    key, lines, target = _lines_and_target(tok, ids, w)[0]
    wrong = next(v for k, v in lines if k != key and v != target)
    (scored,) = torch.nonzero(w[0]).flatten().tolist()
    planted[0, scored] = tok.encode(wrong, add_bos=False)[0]
    assert drill_accuracy(_Fixed(planted, tok.vocab_size), ids, w) == 15 / 16
    # a token outside the trained one is not counted, right or wrong
    planted = gold.clone()
    planted[:, 0] = tok.pad_id
    assert drill_accuracy(_Fixed(planted, tok.vocab_size), ids, w) == 1.0


def test_the_probe_trains_a_tiny_model_and_reports_drills_and_decisions():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from agent_recall_probe import probe

    cfg = BaseModelConfig(family="lookup", digits=3, hidden_size=16, num_layers=1, intermediate_size=32, num_heads=2,
                          batch_size=8, eval_size=16)
    rows: list[str] = []
    last = probe(cfg, steps=4, every=2, batch=8, lines=3, eval_n=16, log=rows.append)
    assert len(rows) == 2 and last["step"] == 4
    assert 0.0 <= last["drill_acc"] <= 1.0 and 0.0 <= last["later_calls_right"] <= 1.0
    assert sum(last["decisions"]["first_read"].values()) == 16  # one first call per stopping-set episode
