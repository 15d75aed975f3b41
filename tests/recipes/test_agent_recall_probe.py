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


def _recall_queries(tok, row, weight):
    """Per trained token of a dense recall drill: (the file's {key: (separator, value)}, the key its query names,
    the query's form, the text just before the token, the token)."""
    ids = [i for i in row.tolist() if i != tok.pad_id]
    text = tok.decode(ids)
    body = text.split('<tool_response name="read">\n')[1].split("\n</tool_response>")[0]
    table = {k: (sep, v) for k, sep, v in (re.fullmatch(r"(\w\w) (->|=) (\w)", ln).groups() for ln in body.split("\n"))}
    out = []
    for j in torch.nonzero(weight).flatten().tolist():
        before = tok.decode(ids[: j + 1])
        line = before.rsplit("\n", 1)[1]
        adjacent = re.fullmatch(r"(\w\w) (->|=) ", line)
        key = adjacent.group(1) if adjacent else re.findall(r"Find the value of (\w\w)\.", before)[-1]
        out.append((table, key, "line" if adjacent else "instruction", line, tok.decode([ids[j + 1]])))
    return out


@pytest.mark.parametrize("instruct", [0.0, 0.5, 1.0])
def test_a_recall_drill_trains_the_value_of_every_key_its_queries_name(instruct):
    from posttrain.agent import format as fmt
    from posttrain.agent.episode import ToolCall
    from posttrain.recipes.builtin import _recall_drills

    tok = char_tokenizer()
    ids, w = _recall_drills(tok, random.Random(2), 32, pairs=(3, 10), instruct=instruct)
    calls = {"->": fmt.render_call(ToolCall("read", {"path": "\0"})).split("\\u0000")[0],
             "=": fmt.render_call(ToolCall("submit", {"answer": "\0"})).split("\\u0000")[0]}
    forms, shared = [], 0
    for row, weight in zip(ids, w):
        queries = _recall_queries(tok, row, weight)
        table = queries[0][0]
        assert 3 <= len(table) <= 10 and len(queries) == 1 + len(table)  # the drill's own query, then one per key
        assert sorted(k for _, k, *_ in queries[1:]) == sorted(table)
        for _, key, form, line, target in queries:
            sep, value = table[key]
            assert target == value  # the named key's value, not another line's
            if form == "line":
                assert line == f"{key} {sep} "
            else:  # the call's tail matches the line: a pointer is read, a value submitted
                assert calls[sep].endswith(line) and line
            forms.append(form)
        keys = list(table)
        shared += sum(a != b and (a[0] == b[0] or a[1] == b[1]) for a in keys for b in keys) > 0
    spelled, after = forms.count("instruction") - len(ids), len(forms) - len(ids)  # every first query is the instruction
    assert 0.4 * after < spelled < 0.6 * after if instruct == 0.5 else spelled == instruct * after
    assert shared >= 0.8 * len(ids)  # keys of a few letters: most drills have keys that share a character in its place


def test_drill_accuracy_scores_a_recall_drills_planted_wrong_value_wrong():
    from posttrain.recipes.builtin import _recall_drills

    tok = char_tokenizer()
    ids, w = _recall_drills(tok, random.Random(3), 8, instruct=0.5)
    gold = ids[:, 1:].clone()
    n = int(w.sum())
    assert drill_accuracy(_Fixed(gold, tok.vocab_size), ids, w) == 1.0
    planted = gold.clone()
    table, key, _, _, target = _recall_queries(tok, ids[0], w[0])[-1]
    wrong = next(v for k, (_, v) in table.items() if v != target)  # another line's value
    j = torch.nonzero(w[0]).flatten().tolist()[-1]
    planted[0, j] = tok.encode(wrong, add_bos=False)[0]
    assert drill_accuracy(_Fixed(planted, tok.vocab_size), ids, w) == (n - 1) / n


def test_a_step_on_two_batches_is_the_step_on_them_as_one():
    """`_sgd_step`'s `more` batches: the same update as one batch holding all the rows (the loss is the mean over every
    counted token, not a mean of the batches' means)."""
    from posttrain.recipes.builtin import _fresh_model, _optimizer, _sgd_step

    tok = char_tokenizer()
    cfg = BaseModelConfig(family="lookup", digits=3, hidden_size=16, num_layers=1, intermediate_size=32, num_heads=2)
    a, b = _copy_drills(tok, random.Random(4), 6, lines=3), _copy_drills(tok, random.Random(5), 3, lines=3)
    width = max(a[0].shape[1], b[0].shape[1])

    def pad(ids, w):
        return (torch.nn.functional.pad(ids, (0, width - ids.shape[1]), value=tok.pad_id),
                torch.nn.functional.pad(w, (0, width - ids.shape[1])))

    whole = tuple(torch.cat(x) for x in zip(pad(*a), pad(*b)))
    models = []
    for batches in ((whole, ()), (a, (b,))):
        model = _fresh_model(cfg, tok.vocab_size, agent=True)
        opt = _optimizer(model, cfg)
        _sgd_step(model, opt, *batches[0], 1e-2, batches[1])
        models.append(model)
    for p, q in zip(models[0].parameters(), models[1].parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)
    # and a step on `a` alone moves the weights elsewhere (the test can tell the batches apart)
    alone = _fresh_model(cfg, tok.vocab_size, agent=True)
    _sgd_step(alone, _optimizer(alone, cfg), *a, 1e-2)
    assert any(not torch.allclose(p, q) for p, q in zip(alone.parameters(), models[1].parameters()))


def test_the_probe_with_recall_drills_reports_their_accuracy():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from agent_recall_probe import probe

    cfg = BaseModelConfig(family="lookup", digits=3, hidden_size=16, num_layers=1, intermediate_size=32, num_heads=2,
                          batch_size=8, eval_size=16)
    last = probe(cfg, steps=2, every=2, batch=4, lines=3, eval_n=8, episodes=False, mqar=4, log=lambda _: None)
    assert 0.0 <= last["mqar_line_acc"] <= 1.0 and 0.0 <= last["mqar_instr_acc"] <= 1.0
