import pytest
import torch

from posttrain.config import RLConfig
from posttrain.models import load_model
from posttrain.rl.learner import Learner
from posttrain.rl.train_batch import pack_groups
from posttrain.types import Completion, FinishReason, Group, Task, Trajectory, Verdict, VerdictStatus


def _group(tok, prompt, completions, scores, statuses=None):
    task = Task(id=prompt, prompt=prompt, answer="0")
    p_ids = tok.encode(prompt)
    trajs = []
    for i, (text, score) in enumerate(zip(completions, scores)):
        ids = tok.encode(text, add_bos=False) + [tok.eos_id]
        status = statuses[i] if statuses else VerdictStatus.OK
        trajs.append(
            Trajectory.single_turn(task, p_ids, Completion(ids, text, [-1.0] * len(ids), FinishReason.STOP),
                                   Verdict(score, score > 0, status))
        )
    return Group(task, trajs)


def test_pack_groups_masks_completions_and_errored_samples(tiny_model_dir):
    _, tok = load_model(tiny_model_dir)
    g = _group(tok, "1+2=", ["3", "45"], [1.0, 0.0], [VerdictStatus.OK, VerdictStatus.ERROR])
    adv = torch.tensor([[1.0, -1.0]])
    valid = torch.tensor([[True, False]])
    batch = pack_groups([g], adv, valid, tok.pad_id)
    p = len(tok.encode("1+2="))
    # row 0: "3<eos>" at positions p, p+1 -> targets at p-1, p
    assert batch.mask[0].nonzero().squeeze(-1).tolist() == [p - 1, p]
    assert batch.old_logp[0, p - 1 : p + 1].tolist() == [-1.0, -1.0]
    assert batch.mask[1].sum() == 0  # errored: out of the loss entirely
    assert batch.input_ids[0, p].item() == tok.encode("3", add_bos=False)[0]


@pytest.mark.parametrize("kw", [{}, {"kl_beta": 0.1}, {"epochs": 2, "minibatches": 2}, {"loss_agg": "seq_mean_token_sum_norm"}])
@pytest.mark.slow
def test_update_moves_toward_rewarded_completion(tiny_model_dir, kw):
    model, tok = load_model(tiny_model_dir)
    learner = Learner(model, RLConfig(lr=1e-2, **kw), max_tokens=4)
    groups = [_group(tok, "1+2=", ["3", "9"], [1.0, 0.0])]

    def logp_of(text):
        ids = torch.tensor([tok.encode("1+2=") + tok.encode(text, add_bos=False)])
        with torch.no_grad():
            return torch.log_softmax(model(ids)[0, -2], -1)[ids[0, -1]].item()

    before = logp_of("3") - logp_of("9")
    for _ in range(5):
        # behaviour logprobs from the current policy, so the first pass is on-policy
        for t in groups[0].trajectories:
            ids = torch.tensor([t.prompt_ids + t.completion.token_ids])
            with torch.no_grad():
                lp = torch.log_softmax(model(ids)[0, :-1], -1).gather(-1, ids[0, 1:, None]).squeeze(-1)
            t.completion.logprobs = lp[len(t.prompt_ids) - 1 :].tolist()
        batch = pack_groups(groups, torch.tensor([[1.0, -1.0]]), torch.tensor([[True, True]]), tok.pad_id)
        metrics = learner.update(batch)
        assert metrics["mismatch_max"] < 1e-4
        if kw.get("kl_beta"):
            assert metrics["kl"] >= 0
    assert logp_of("3") - logp_of("9") > before
    assert learner.updates == 5 * kw.get("epochs", 1) * kw.get("minibatches", 1)


@pytest.mark.slow
def test_optimizer_state_roundtrip(tiny_model_dir):
    model, tok = load_model(tiny_model_dir)
    a = Learner(model, RLConfig(), max_tokens=4)
    batch = pack_groups([_group(tok, "1=", ["1", "2"], [1.0, 0.0])], torch.tensor([[1.0, -1.0]]),
                        torch.ones(1, 2, dtype=torch.bool), tok.pad_id)
    a.update(batch)
    b = Learner(model, RLConfig(), max_tokens=4)
    b.load_state_dict(a.state_dict())
    assert b.updates == 1
    sa, sb = a.optimizer.state_dict()["state"], b.optimizer.state_dict()["state"]
    assert all(torch.equal(sa[k]["exp_avg"], sb[k]["exp_avg"]) for k in sa)


def _batch_of_eight(tok):
    groups = [_group(tok, p, ["3", "45", "6", "7"], [1.0, 0.0, 0.0, 1.0]) for p in ("1+2=", "12+3=")]
    adv = torch.tensor([[1.0, -1.0, -1.0, 1.0], [0.5, -0.5, -0.5, 0.5]])
    return pack_groups(groups, adv, torch.ones(2, 4, dtype=torch.bool), tok.pad_id)


@pytest.mark.parametrize("loss_agg", ["token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm"])
@pytest.mark.slow
def test_one_minibatch_of_eight_equals_eight_micro_batches_of_one(tiny_model_dir, loss_agg):
    """Gradient accumulation is an invariance: the same update, within float tolerance."""
    updated = []
    for micro in (1, 8):
        model, tok = load_model(tiny_model_dir)
        learner = Learner(model, RLConfig(lr=1e-2, loss_agg=loss_agg, micro_batches=micro, kl_beta=0.05), max_tokens=4)
        metrics = learner.update(_batch_of_eight(tok))
        assert learner.updates == 1
        # Adam's first step is ~lr * sign(grad), which turns float noise on near-zero gradients into
        # whole steps: compare the (clipped) gradient the optimizer received, its first moment / (1 - beta1)
        grads = {n: learner.optimizer.state[p]["exp_avg"] / 0.1 for n, p in model.named_parameters()}
        updated.append((grads, metrics))
    (a, ma), (b, mb) = updated
    for k in a:
        assert torch.allclose(a[k], b[k], rtol=1e-4, atol=1e-7), k
    for key in ("pg_loss", "loss", "kl", "entropy", "clip_frac", "grad_norm"):
        assert ma[key] == pytest.approx(mb[key], rel=1e-4, abs=1e-7), key


def test_importance_sampling_corrects_an_off_policy_sampler(tiny_model_dir):
    model, tok = load_model(tiny_model_dir)
    batch = _batch_of_eight(tok)  # behaviour logprobs of -1.0: not what this model assigns
    on = Learner(model, RLConfig(lr=1e-3), max_tokens=4, importance_sampling=True)
    metrics = on.update(batch)
    assert metrics["mismatch_mean"] > 0.1  # the gap is measured...
    assert metrics["clip_frac"] == 0.0  # ...but the clip is taken against the learner's own old logprobs


def test_lr_schedules_warm_up_then_decay_to_the_floor():
    from posttrain.rl.learner import scheduled_lr

    lr = 1e-3
    # warm-up is linear and shared by every schedule
    for schedule in ("constant", "cosine", "linear"):
        assert [scheduled_lr(lr, u, 4, schedule, 20, 0.1) for u in range(4)] == pytest.approx([2.5e-4, 5e-4, 7.5e-4, 1e-3])
    assert scheduled_lr(lr, 19, 4, "constant", 20, 0.1) == lr
    # decays start at lr right after warm-up and end at lr x min_ratio on the last update
    for schedule in ("cosine", "linear"):
        assert scheduled_lr(lr, 4, 4, schedule, 20, 0.1) == pytest.approx(lr)
        assert scheduled_lr(lr, 19, 4, schedule, 20, 0.1) == pytest.approx(1e-4)
        assert scheduled_lr(lr, 50, 4, schedule, 20, 0.1) == pytest.approx(1e-4)  # past the end: the floor
    # halfway: cosine and linear meet at the midpoint of lr and the floor
    assert scheduled_lr(lr, 11, 0, "linear", 23, 0.0) == pytest.approx(5e-4)
    assert scheduled_lr(lr, 11, 0, "cosine", 23, 0.0) == pytest.approx(5e-4)
    # cosine stays above linear in the first half (slower start)
    assert scheduled_lr(lr, 5, 0, "cosine", 23, 0.0) > scheduled_lr(lr, 5, 0, "linear", 23, 0.0)
    # unknown total: constant after warm-up
    assert scheduled_lr(lr, 100, 0, "cosine", None, 0.1) == lr


@pytest.mark.parametrize("kw", [{}, {"kl_beta": 0.05, "micro_batches": 2}, {"epochs": 2, "minibatches": 2}])
@pytest.mark.slow
def test_sharing_each_groups_prompt_is_the_same_update(tiny_model_dir, kw):
    """rl.share_prefix runs each group's prompt once for its completions: the same gradient and metrics as
    every row run whole, within float tolerance (compared as above: Adam's first moment, not its step)."""
    updated = []
    for share in (False, True):
        model, tok = load_model(tiny_model_dir)
        learner = Learner(model, RLConfig(lr=1e-2, share_prefix=share, **kw), max_tokens=4)
        batch = _batch_of_eight(tok)
        assert batch.groups.tolist() == [0, 0, 0, 0, 1, 1, 1, 1]
        assert (learner._prefix_trees(batch) is not None) == share  # trees cost fewer FLOPs on this batch
        metrics = learner.update(batch)
        grads = {n: learner.optimizer.state[p]["exp_avg"] for n, p in model.named_parameters()}
        updated.append((grads, metrics))
    (a, ma), (b, mb) = updated
    for k in a:
        assert torch.allclose(a[k], b[k], rtol=1e-4, atol=1e-7), k
    for key in ("pg_loss", "loss", "entropy", "clip_frac", "grad_norm", "mismatch_mean", *(["kl"] if kw.get("kl_beta") else [])):
        assert ma[key] == pytest.approx(mb[key], rel=1e-4, abs=1e-7), key
