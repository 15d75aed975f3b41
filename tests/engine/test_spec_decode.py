"""Exact speculative decoding: greedy identity, the rejection rule's distribution, and end-to-end chi-square tests."""

import math

import pytest
import torch

from posttrain.engine import LocalEngine, SpecConfig
from posttrain.engine.local.spec_decode import ngram_propose, verify
from posttrain.models import CausalLM, ModelConfig, char_tokenizer, load_model
from posttrain.types import SamplingParams


def _chi2_pvalue(observed: torch.Tensor, expected_p: torch.Tensor) -> float:
    """Pearson chi-square goodness of fit; cells with expected count < 5 are pooled."""
    n = observed.sum()
    exp = expected_p * n
    small = exp < 5
    obs = torch.cat([observed[~small], observed[small].sum()[None]]) if small.any() else observed
    exp = torch.cat([exp[~small], exp[small].sum()[None]]) if small.any() else exp
    keep = exp > 0
    stat = float(((obs[keep] - exp[keep]) ** 2 / exp[keep]).sum())
    dof = int(keep.sum()) - 1
    return float(torch.special.gammaincc(torch.tensor(dof / 2, dtype=torch.float64), torch.tensor(stat / 2, dtype=torch.float64)))


def test_ngram_proposer_copies_what_followed_the_suffix():
    assert ngram_propose([1, 2, 3, 4, 9, 1, 2, 3], k=2, n_max=3, n_min=1) == [4, 9]
    assert ngram_propose([1, 2, 3], k=2, n_max=3, n_min=2) == []


def test_rejection_rule_output_is_distributed_as_the_target():
    p = torch.tensor([0.5, 0.3, 0.15, 0.05])
    q = torch.tensor([0.1, 0.6, 0.1, 0.2])
    rows, g = 40_000, torch.Generator().manual_seed(0)
    drafts = torch.multinomial(q, rows, replacement=True, generator=g)[:, None]
    n_acc, nxt = verify(p.expand(rows, 2, 4), drafts, torch.ones(rows, dtype=torch.long), q.expand(rows, 1, 4), False, g)
    first = torch.where(n_acc == 1, drafts[:, 0], nxt)  # the token emitted at the drafted position
    assert _chi2_pvalue(torch.bincount(first, minlength=4).double(), p.double()) > 1e-3


def test_rejection_rule_with_lookup_drafts_keeps_the_target():
    p = torch.tensor([0.5, 0.3, 0.15, 0.05])
    rows, g = 40_000, torch.Generator().manual_seed(1)
    drafts = torch.full((rows, 1), 2)  # a deterministic proposal: q is one-hot
    n_acc, nxt = verify(p.expand(rows, 2, 4), drafts, torch.ones(rows, dtype=torch.long), None, False, g)
    first = torch.where(n_acc == 1, drafts[:, 0], nxt)
    assert _chi2_pvalue(torch.bincount(first, minlength=4).double(), p.double()) > 1e-3


@pytest.fixture(scope="module")
def pair(tiny_model_dir):
    target, tok = load_model(tiny_model_dir)
    return target, tok


def test_greedy_speculative_is_token_identical(pair):
    target, tok = pair
    prompts = ["abcabcabcabc", "12+34=46; 12+34=", "xyz"]
    plain = LocalEngine(target, tok).generate(prompts, SamplingParams(temperature=0, max_tokens=20, ignore_eos=True))
    for spec in (SpecConfig("ngram", k=4), SpecConfig("draft", k=3, draft_model=target)):
        eng = LocalEngine(target, tok, speculative=spec)
        got = eng.generate(prompts, SamplingParams(temperature=0, max_tokens=20, ignore_eos=True))
        for a, b in zip(plain, got):
            assert a[0].token_ids == b[0].token_ids
            torch.testing.assert_close(torch.tensor(a[0].logprobs), torch.tensor(b[0].logprobs), atol=1e-5, rtol=1e-5)
        m = eng.metrics()
        if spec.method == "draft":  # the target as its own draft: every proposal is accepted
            assert m["spec_acceptance_rate"] == 1.0 and m["tokens_per_forward"] > 2.5


def _peaky_model(vocab: int, seed: int) -> CausalLM:
    cfg = ModelConfig(vocab_size=vocab, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1)
    m = CausalLM(cfg)
    m.init_weights(torch.Generator().manual_seed(seed), std=0.6)  # far from uniform: a meaningful test
    return m.eval()


@pytest.mark.parametrize("method", ["ngram", "draft"])
def test_sampled_distribution_matches_plain_sampling(method):
    """Chi-square over the joint of three sampled tokens against the target's exact probabilities."""
    vocab = 6
    target, draft = _peaky_model(vocab, 0), _peaky_model(vocab, 1)
    tok = char_tokenizer()
    prompt = [1, 2, 3, 1, 2]
    spec = SpecConfig(method, k=3, ngram_min=1, draft_model=draft if method == "draft" else None)
    eng = LocalEngine(target, tok, speculative=spec, max_batch_rows=4096)
    params = SamplingParams(n=4000, max_tokens=4, temperature=1.0, ignore_eos=True, seed=5)
    comps = eng.generate([prompt], params)[0]
    assert eng.metrics()["spec_accepted"] > 0
    seqs = torch.tensor([c.token_ids[1:4] for c in comps])  # tokens 2-4: the speculated ones
    first = torch.tensor([c.token_ids[0] for c in comps])
    # exact P(x2, x3, x4 | x1 = most common first token) by enumeration
    x1 = int(torch.bincount(first).argmax())
    sel = seqs[first == x1]
    grid = torch.cartesian_prod(*[torch.arange(vocab)] * 3)  # [V^3, 3]
    ids = torch.cat([torch.tensor(prompt + [x1]).expand(len(grid), -1), grid], 1)
    with torch.no_grad():
        logp = torch.log_softmax(target(ids)[:, :-1].double(), -1)
    pos = len(prompt)
    lp = sum(logp[torch.arange(len(grid)), pos + j, grid[:, j]] for j in range(3))
    expected = lp.exp()
    codes = sel[:, 0] * vocab * vocab + sel[:, 1] * vocab + sel[:, 2]
    observed = torch.bincount(codes, minlength=vocab**3).double()
    assert math.isclose(float(expected.sum()), 1.0, rel_tol=1e-6)
    assert _chi2_pvalue(observed, expected) > 1e-3


def test_small_lookup_verify_keeps_the_target_and_agrees_with_the_tensor_rule():
    """The plain-Python verify used at batch 1: the emitted token is distributed as p, and the
    acceptance rate equals the tensor path's p(draft)."""
    from posttrain.engine.local import spec_decode

    p = torch.tensor([0.5, 0.3, 0.15, 0.05])
    g = torch.Generator().manual_seed(2)
    counts, accepted, n = torch.zeros(4), 0, 20_000
    for _ in range(n):
        a, x = spec_decode._verify_lookup_small(p.expand(1, 2, 4), torch.tensor([[2]]), torch.tensor([1]), False, g)
        counts[2 if int(a) == 1 else int(x)] += 1
        accepted += int(a)
    assert _chi2_pvalue(counts.double(), p.double()) > 1e-3
    assert abs(accepted / n - 0.15) < 0.01
    # greedy: accepts exactly the argmax chain and then emits the argmax
    probs = torch.tensor([[[0.1, 0.7, 0.2], [0.6, 0.3, 0.1], [0.2, 0.2, 0.6]]])
    a, x = spec_decode._verify_lookup_small(probs, torch.tensor([[1, 0]]), torch.tensor([2]), True, None)
    assert (int(a), int(x)) == (2, 2)
    a, x = spec_decode._verify_lookup_small(probs, torch.tensor([[1, 2]]), torch.tensor([2]), True, None)
    assert (int(a), int(x)) == (1, 0)
    a, x = spec_decode._verify_lookup_small(probs, torch.tensor([[1, 2]]), torch.tensor([0]), True, None)  # no drafts
    assert (int(a), int(x)) == (0, 1)


def test_lookup_carries_its_alignment_over_a_substitution():
    from posttrain.engine.local.spec_decode import lookup_propose

    text = [10, 11, 12, 13, 14, 15, 16, 17]
    seq = text + [99] + text[:3]  # copying the text: 10 11 12 so far
    assert lookup_propose(seq, 3, 4, 2) == ([13, 14, 15], 3)  # suffix "11 12" found: read on from index 3
    typo = text + [99] + [10, 11, 50]  # the copy substituted 50 for 12: no suffix matches any more ...
    assert lookup_propose(typo, 3, 4, 2) == ([], -1)
    assert lookup_propose(typo, 3, 4, 2, carry=3) == ([13, 14, 15], 3)  # ... but the carried source still reads on
    assert lookup_propose(typo, 3, 4, 2, carry=len(typo)) == ([], -1)  # a source must lie in the history


def test_speculative_engine_with_carry_matches_plain_sampling_in_distribution(pair):
    """The carried alignment only changes what is proposed: T=1 first-token frequencies equal plain decoding's."""
    target, tok = pair
    prompt = "abcdabcdabcdab"
    params = SamplingParams(temperature=1.0, max_tokens=3, ignore_eos=True, n=400, seed=3)
    spec = LocalEngine(target, tok, speculative=SpecConfig("ngram", k=3, ngram_max=3, ngram_min=2, carry=True))
    plain = LocalEngine(target, tok)
    with torch.no_grad():
        p = torch.softmax(target(torch.tensor([tok.encode(prompt)]))[0, -1], -1)
    for eng in (spec, plain):
        firsts = [c.token_ids[0] for c in eng.generate([prompt], params)[0]]
        counts = torch.bincount(torch.tensor(firsts), minlength=p.shape[0]).double()
        assert _chi2_pvalue(counts, p.double()) > 1e-3
