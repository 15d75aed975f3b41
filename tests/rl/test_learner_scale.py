"""The learner's memory and precision knobs: packing, chunked logprobs, bf16, checkpointing, device checks."""

import pytest
import torch

from posttrain.config import ConfigError, RLConfig, load_config
from posttrain.models import load_model
from posttrain.rl.learner import Learner
from posttrain.rl.train_batch import pack_groups, pack_rows
from posttrain.types import Completion, FinishReason, Group, Task, Trajectory, Verdict


def _groups(tok):
    out = []
    for prompt, texts in (("1+2=", ["3", "45", "678", "9"]), ("12+30=", ["42", "4", "1234", "0"])):
        task = Task(id=prompt, prompt=prompt, answer="0")
        trajs = []
        for i, text in enumerate(texts):
            ids = tok.encode(text, add_bos=False) + [tok.eos_id]
            lps = [-0.5 - 0.1 * j - 0.05 * i for j in range(len(ids))]
            trajs.append(Trajectory.single_turn(task, tok.encode(prompt), Completion(ids, text, lps, FinishReason.STOP),
                                                Verdict(float(i % 2), i % 2 == 1)))
        out.append(Group(task, trajs))
    return out


def _batch(tok):
    adv = torch.tensor([[1.0, -1.0, 0.5, -0.5], [0.3, -0.3, 1.2, -1.2]])
    return pack_groups(_groups(tok), adv, torch.ones(2, 4, dtype=torch.bool), tok.pad_id)


def test_pack_rows_keeps_every_target_once(tiny_model_dir):
    _, tok = load_model(tiny_model_dir)
    padded = _batch(tok)
    packed = pack_rows(padded, width=24)
    assert packed.input_ids.shape[0] < padded.input_ids.shape[0]  # fewer rows than sequences
    assert packed.mask.sum() == padded.mask.sum()
    assert torch.equal(packed.old_logp[packed.mask > 0].sort().values, padded.old_logp[padded.mask > 0].sort().values)
    adv_per_target = (padded.advantages[:, None] * padded.mask)[padded.mask > 0]
    assert torch.equal(packed.advantages[packed.mask > 0].sort().values, adv_per_target.sort().values)


@pytest.mark.parametrize("kw", [{}, {"kl_beta": 0.1, "epochs": 2}])
@pytest.mark.slow
def test_packing_and_padding_give_the_same_update(tiny_model_dir, kw):
    results = []
    for packing in (False, True):
        model, tok = load_model(tiny_model_dir)
        learner = Learner(model, RLConfig(lr=1e-2, packing=packing, pack_tokens=24, **kw), max_tokens=5,
                          importance_sampling=True)
        metrics = learner.update(_batch(tok))
        # Adam's first step is ~lr * sign(grad) (float noise on near-zero gradients becomes whole steps):
        # compare the gradients the optimizer received, through its first moment
        results.append((metrics, {n: learner.optimizer.state[p]["exp_avg"].clone() for n, p in model.named_parameters()}))
    (ma, wa), (mb, wb) = results
    for key in ("pg_loss", "loss", "entropy", "clip_frac", "grad_norm", "mismatch_mean"):
        assert mb[key] == pytest.approx(ma[key], rel=1e-5, abs=1e-7), key
    for n in wa:
        torch.testing.assert_close(wb[n], wa[n], atol=1e-7, rtol=1e-4, msg=n)


def test_chunked_learner_equals_one_chunk(tiny_model_dir):
    results = []
    for chunk in (4096, 7):
        model, tok = load_model(tiny_model_dir)
        learner = Learner(model, RLConfig(lr=1e-2, logprob_chunk=chunk), max_tokens=5)
        metrics = learner.update(_batch(tok))
        results.append((metrics, [learner.optimizer.state[p]["exp_avg"].clone() for p in model.parameters()]))
    (ma, wa), (mb, wb) = results
    assert mb["pg_loss"] == pytest.approx(ma["pg_loss"], rel=1e-5)
    for a, b in zip(wa, wb):
        torch.testing.assert_close(b, a, atol=1e-7, rtol=1e-4)


@pytest.mark.slow
def test_bf16_and_checkpointed_learner_train_close_to_fp32(tiny_model_dir):
    base_model, tok = load_model(tiny_model_dir)
    ref = Learner(base_model, RLConfig(lr=1e-2), max_tokens=5).update(_batch(tok))
    for kw in ({"dtype": "bf16"}, {"activation_checkpointing": True}):
        model, _ = load_model(tiny_model_dir)
        learner = Learner(model, RLConfig(lr=1e-2, **kw), max_tokens=5)
        metrics = learner.update(_batch(tok))
        assert all(p.dtype == torch.float32 for p in model.parameters())  # fp32 master weights
        tol = 0.05 if kw.get("dtype") else 1e-6
        assert metrics["pg_loss"] == pytest.approx(ref["pg_loss"], abs=tol)
        assert metrics["entropy"] == pytest.approx(ref["entropy"], abs=tol * 10)


def test_local_engine_must_share_the_learners_device():
    with pytest.raises((ConfigError, ValueError), match="engine.device"):
        load_config(None, ["rl.device='cuda'"])


def test_packing_refuses_per_sequence_aggregation():
    with pytest.raises(ValueError, match="token_mean"):
        RLConfig(packing=True, loss_agg="seq_mean_token_mean")
