"""Per-token records: the learner keeps the first pass's logprobs and entropies it computes anyway, `step_tokens`
finds each stored sample's completion in the update's rows, and a training run stores them beside its samples."""

from __future__ import annotations

import math

import pytest
import torch

from posttrain.config import RLConfig
from posttrain.models import load_model
from posttrain.models.logprobs import chunked_logprobs
from posttrain.rl.learner import Learner
from posttrain.rl.token_record import TokenPieces, step_tokens
from posttrain.rl.train_batch import pack_groups, pack_rows, unpack_rows
from posttrain.types import Completion, FinishReason, Group, Task, Trajectory, Verdict


def _group(tok, prompt, texts, scores, logp=-1.0):
    task = Task(id=prompt, prompt=prompt, answer="0")
    trajs = []
    for text, score in zip(texts, scores):
        ids = tok.encode(text, add_bos=False) + [tok.eos_id]
        trajs.append(Trajectory.single_turn(task, tok.encode(prompt), Completion(ids, text, [logp] * len(ids),
                                                                                 FinishReason.STOP), Verdict(score, score > 0)))
    return Group(task, trajs)


def _learner_values(model, batch):
    with torch.no_grad():
        logp, ent = chunked_logprobs(model, batch.input_ids, 1.0, 64, entropy=True)
    return logp, ent


@pytest.mark.slow
@pytest.mark.parametrize("packing", [False, True])
def test_learner_keeps_its_pre_update_logprobs_and_entropies(tiny_model_dir, packing):
    model, tok = load_model(tiny_model_dir)
    groups = [_group(tok, "1+2=", ["3", "45"], [1.0, 0.0]), _group(tok, "7=", ["7", "1234"], [0.0, 1.0])]
    batch = pack_groups(groups, torch.tensor([[1.0, -1.0], [-1.0, 1.0]]), torch.ones(2, 2, dtype=torch.bool), tok.pad_id)
    want_logp, want_ent = _learner_values(model, batch)  # before the update moves anything
    learner = Learner(model, RLConfig(lr=1e-2, packing=packing, share_prefix=False), max_tokens=4)
    learner.update(batch)
    assert learner.token_values is None  # off unless asked: nothing kept
    learner.record_tokens = True
    model2, _ = load_model(tiny_model_dir)
    learner = Learner(model2, RLConfig(lr=1e-2, packing=packing, share_prefix=False), max_tokens=4)
    learner.record_tokens = True
    learner.update(batch)
    got = learner.token_values
    assert got is not None and got.logp.shape == batch.mask.shape
    on = batch.mask > 0
    assert torch.allclose(got.logp[on], want_logp[on], atol=1e-5)
    assert torch.allclose(got.entropy[on], want_ent[on], atol=1e-5)
    assert (got.entropy[on] > 0).all()


def test_unpack_rows_undoes_pack_rows(tiny_model_dir):
    _, tok = load_model(tiny_model_dir)
    groups = [_group(tok, "1+2=", ["3", "45", "678"], [1.0, 0.0, 1.0])]
    batch = pack_groups(groups, torch.tensor([[1.0, -1.0, 1.0]]), torch.ones(1, 3, dtype=torch.bool), tok.pad_id)
    packed = pack_rows(batch, 32)
    assert packed.input_ids.shape[0] < batch.input_ids.shape[0]  # really packed
    back = unpack_rows(packed.old_logp, batch.lengths, packed.input_ids.shape[1])
    real = torch.arange(batch.mask.shape[1])[None, :] < (batch.lengths[:, None] - 1)
    assert torch.equal(back[real], batch.old_logp[real]) and back[~real].isnan().all()


def test_step_tokens_place_learner_values_on_each_completion(tiny_model_dir):
    _, tok = load_model(tiny_model_dir)
    trained = _group(tok, "1+2=", ["3", "45"], [1.0, 0.0], logp=-0.5)
    dropped = _group(tok, "9=", ["9", "9"], [1.0, 1.0], logp=-0.25)  # zero variance: not in the update
    batch = pack_groups([trained], torch.tensor([[1.0, -1.0]]), torch.ones(1, 2, dtype=torch.bool), tok.pad_id)
    from posttrain.rl.train_batch import TokenValues

    # plant recognisable values: learner logp = -(target index), entropy = target index / 10
    idx = torch.arange(batch.mask.shape[1], dtype=torch.float).expand_as(batch.mask)
    values = TokenValues(-idx.clone(), idx / 10)
    pieces = TokenPieces(tok)
    record = step_tokens([dropped, trained], [trained], batch, values, pieces)
    assert sorted(record.pieces) == sorted(set(record.ids.tolist()))  # every text handed out, each once
    rows = record.rows(record.pieces)
    assert [(r.group_idx, r.sample_idx) for r in rows] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    p = len(tok.encode("1+2="))
    second = rows[3]  # "45<eos>": tokens at positions p..p+2, targets p-1..p+1
    assert second.pieces == ["4", "5", ""] and second.sampler_logp == [-0.5] * 3
    assert second.learner_logp == [-(p - 1), -p, -(p + 1)] and second.loss_mask == [True] * 3
    assert second.entropy == pytest.approx([(p - 1) / 10, p / 10, (p + 1) / 10])
    for r in rows[:2]:  # the dropped group: sampler values only, nothing in the loss
        assert r.pieces == ["9", ""] and r.sampler_logp == [-0.25, -0.25] and r.loss_mask == [False, False]
        assert all(math.isnan(x) for x in r.learner_logp + r.entropy)


def test_step_tokens_never_place_values_on_other_tokens(tiny_model_dir):
    _, tok = load_model(tiny_model_dir)
    g = _group(tok, "1+2=", ["3", "45"], [1.0, 0.0])
    batch = pack_groups([g], torch.tensor([[1.0, -1.0]]), torch.ones(1, 2, dtype=torch.bool), tok.pad_id)
    g.trajectories[1].completion.token_ids = tok.encode("67", add_bos=False) + [tok.eos_id]  # not what was trained
    from posttrain.rl.train_batch import TokenValues

    record = step_tokens([g], [g], batch, TokenValues(torch.zeros_like(batch.mask), torch.zeros_like(batch.mask)),
                         TokenPieces(tok))
    rows = record.rows(record.pieces)
    assert rows[0].learner_logp == [0.0, 0.0] and rows[0].loss_mask == [True, True]
    assert all(math.isnan(x) for x in rows[1].learner_logp) and rows[1].loss_mask == [False] * 3


@pytest.mark.slow
def test_a_training_run_stores_each_samples_tokens(tiny_config):
    from posttrain.rl.trainer import Trainer
    from posttrain.store import RunStore

    cfg = tiny_config.model_copy(update={"reward": tiny_config.reward.model_copy(update={"verifier": "numeric",
                                                                                          "tolerance": 4.0}),
                                         "train": tiny_config.train.model_copy(update={"steps": 2}),
                                         "eval": tiny_config.eval.model_copy(update={"every": 0})})
    trainer = Trainer(cfg)
    trainer.run()
    trainer.close()
    with RunStore(cfg.path / "run.sqlite") as store:
        for step in (1, 2):
            samples = store.db.execute("SELECT group_idx, sample_idx, completion FROM samples WHERE step = ? "
                                       "ORDER BY group_idx, sample_idx", (step,)).fetchall()
            used = {g for g, u in store.db.execute("SELECT group_idx, used FROM groups WHERE step = ?", (step,)) if u}
            rows = store.sample_tokens(step)
            assert [(r.group_idx, r.sample_idx) for r in rows] == [(g, j) for g, j, _ in samples]
            for r, (g, _, text) in zip(rows, samples):
                assert "".join(r.pieces) == text
                if g in used and any(r.loss_mask):
                    # the local engine is the learner's own module: sampler and learner agree (float16 storage)
                    pairs = [(a, b) for a, b, m in zip(r.sampler_logp, r.learner_logp, r.loss_mask) if m]
                    assert all(abs(a - b) < 0.02 * max(1.0, abs(a)) for a, b in pairs)
                    assert all(e >= 0 for e, m in zip(r.entropy, r.loss_mask) if m)
                else:
                    assert not any(r.loss_mask) and all(math.isnan(x) for x in r.learner_logp)
            assert used  # the check above compared something


def _reference_rows(sampled, kept, batch, values):
    """The per-token record written token by token (the form before `step_tokens` gathered whole columns): the
    reference the vectorised gathers must equal."""
    trained, row = {}, 0
    for g in kept:
        for t in g.trajectories:
            row += 1 if len(t.turns) == 1 else len(t.segments())
            trained[id(t)] = row - 1
    out = []
    for g in sampled:
        for t in g.trajectories:
            ids = list(t.completion.token_ids)
            n = len(ids)
            learner, entropy, loss = [math.nan] * n, [math.nan] * n, [False] * n
            r = trained.get(id(t))
            if r is not None and n:
                length = int(batch.lengths[r])
                lo, hi = length - n, length
                if lo >= 1 and batch.input_ids[r, lo:hi].tolist() == ids:
                    loss = [bool(m) for m in batch.mask[r, lo - 1:hi - 1].tolist()]
                    learner = [float(x) if m else math.nan for x, m in zip(values.logp[r, lo - 1:hi - 1].tolist(), loss)]
                    entropy = [float(x) if m else math.nan for x, m in zip(values.entropy[r, lo - 1:hi - 1].tolist(), loss)]
            out.append((ids, list(t.completion.logprobs), learner, entropy, loss))
    return out


def test_step_tokens_equal_the_token_by_token_reference_on_random_steps(tiny_model_dir):
    import random

    from posttrain.rl.train_batch import TokenValues

    _, tok = load_model(tiny_model_dir)
    rng, gen = random.Random(0), torch.Generator().manual_seed(0)
    digits = "0123456789+="
    placed = 0
    for trial in range(20):
        groups = []
        for k in range(rng.randint(1, 5)):
            texts = ["".join(rng.choice(digits) for _ in range(rng.randint(0, 6))) for _ in range(rng.randint(1, 4))]
            groups.append(_group(tok, f"{k}+{trial}=", texts, [rng.random() for _ in texts], logp=-rng.random()))
        kept = [g for g in groups if rng.random() < 0.7]
        batch = values = None
        if kept:
            adv = torch.randn(len(kept), max(len(g.trajectories) for g in kept), generator=gen)
            valid = torch.tensor([[j < len(g.trajectories) for j in range(adv.shape[1])] for g in kept])
            batch = pack_groups(kept, adv, valid, tok.pad_id)
            batch.mask[torch.rand(batch.mask.shape, generator=gen) < 0.2] = 0  # some tokens out of the loss
            values = TokenValues(torch.randn(batch.mask.shape, generator=gen), torch.rand(batch.mask.shape, generator=gen))
            for g in kept:  # some completions changed after packing: their values must not be placed
                c = g.trajectories[0].completion
                if rng.random() < 0.3 and c.token_ids:
                    c.token_ids, c.logprobs = list(c.token_ids[::-1]) + [7], list(c.logprobs) + [-1.0]
        record = step_tokens(groups, kept, batch, values, TokenPieces(tok))
        want = _reference_rows(groups, kept, batch, values) if batch is not None else [
            (list(t.completion.token_ids), list(t.completion.logprobs), *([math.nan] * len(t.completion.token_ids),) * 2,
             [False] * len(t.completion.token_ids)) for g in groups for t in g.trajectories]
        rows = record.rows({i: str(i) for i in range(tok.vocab_size)})
        assert [(r.group_idx, r.sample_idx) for r in rows] == [(i, j) for i, g in enumerate(groups)
                                                               for j in range(len(g.trajectories))]
        for r, (ids, sampler, learner, entropy, loss) in zip(rows, want):
            assert r.pieces == [str(i) for i in ids] and r.loss_mask == loss
            for got, exp in ((r.sampler_logp, sampler), (r.learner_logp, learner), (r.entropy, entropy)):
                assert got == pytest.approx(exp, nan_ok=True, abs=1e-6)
        placed += sum(any(r.loss_mask) for r in rows)
    assert placed > 20  # the comparisons above covered placed values, not only empty ones


def test_token_texts_go_to_the_store_once_and_survive_a_failed_write(tiny_model_dir):
    from posttrain.rl.run_log import RunLog

    _, tok = load_model(tiny_model_dir)

    class FailingOnce:
        def __init__(self):
            self.calls, self.pieces = 0, []

        def log_step(self, step, metrics, groups, samples, tokens):
            self.calls += 1
            if self.calls == 1:
                raise OSError("disk full")
            self.pieces.append(dict(tokens.pieces))

    store = FailingOnce()
    log = RunLog(store, None, True, TokenPieces(tok))  # type: ignore[arg-type]
    g = _group(tok, "1+2=", ["3", "45"], [1.0, 0.0])
    with pytest.raises(OSError):
        log.record_step(1, {}, [g], [])
    log.record_step(1, {}, [g], [])  # the retry still hands out every text
    log.record_step(2, {}, [g, _group(tok, "7=", ["46"], [1.0])], [])
    first, second = store.pieces
    assert sorted(first) == sorted({i for t in g.trajectories for i in t.completion.token_ids})
    assert list(second.values()) == ["6"]  # only the new token's text
