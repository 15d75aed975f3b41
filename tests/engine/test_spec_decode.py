"""Exact speculative decoding: greedy identity, the rejection rule's distribution, and end-to-end chi-square tests.

Covers: the proposers and `verify` in isolation; greedy speculative output equal to plain decoding token
for token (32 tokens, prompt lookup and a draft model, k = 3 and 8, one request at a time, four at once,
and n = 3 samples of one prompt); sampled tokens after the first, which are the speculated ones,
distributed as the target model says, one request at a time (the batch-1 path: the C kernel's
verification forward and the plain-Python lookup verify) and in one wide request; and the benchmarked
configuration end to end (`benchmarks/engine.py`'s prompt lookup, k = 8, T = 1, n = 1 requests).

The batch-1 distribution tests compare every emitted token with its exact conditional distribution
given the prompt and the tokens before it, from one teacher-forced forward pass of the target over each
sample (`_conditional_pvalues`). Their false-failure rate: each test makes L per-position tests at
level 1e-4 / L (Bonferroni), and each per-position statistic is at most as large, in distribution, as
the chi-square it is compared with (see `_conditional_pvalues`), so a correct engine fails a test with
probability at most 1e-4 over the choice of seeds; the seeds are fixed, so a run is deterministic. Their
power, checked by hand with patched verify functions while writing them: at these sample sizes each test
fails, with p-values of 1e-8 or less against thresholds near 1e-5, when the lookup verify keeps the
rejected draft in the residual or draws the bonus token from the position before, or the draft-model
verify replaces a rejected draft from p instead of max(p - q, 0).
Does not cover: speed (benchmarks/engine.py).
"""

import copy
import dataclasses
import math
import random

import pytest
import torch

from posttrain.engine import LocalEngine, SpecConfig
from posttrain.engine.local.spec_decode import ngram_propose, verify
from posttrain.models import CausalLM, ModelConfig, char_tokenizer, load_model
from posttrain.types import SamplingParams
from tiny_models import copier_model


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


@pytest.mark.slow
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
    cfg = ModelConfig(
        vocab_size=vocab, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1
    )
    m = CausalLM(cfg)
    m.init_weights(torch.Generator().manual_seed(seed), std=0.6)  # far from uniform: a meaningful test
    return m.eval()


@pytest.mark.parametrize("method", ["ngram", "draft"])
@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
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


# -- greedy identity over many tokens ---------------------------------------------------------------------------


def _random_lm(seed: int, std: float = 0.2) -> CausalLM:
    """A random char-level model whose greedy output wanders before it loops (the default init repeats one
    character at once, which every proposal matches): lookup and draft proposals are partly accepted."""
    tok = char_tokenizer()
    cfg = ModelConfig(vocab_size=tok.vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=256)  # fmt: skip
    m = CausalLM(cfg)
    m.init_weights(torch.Generator().manual_seed(seed), std=std)
    return m.eval()


def _perturbed(model: CausalLM, scale: float, seed: int) -> CausalLM:
    """A draft that agrees with the target most of the time: its weights plus `scale` x their spread of noise."""
    m = copy.deepcopy(model)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in m.parameters():
            p.add_(torch.randn(p.shape, generator=g) * p.std() * scale)
    return m


@pytest.fixture(scope="module")
def greedy_models():
    target = _random_lm(0)
    return target, _perturbed(target, 0.1, 1), char_tokenizer()


GREEDY_PROMPTS = ["abcabcabcabc", "12+34=46; 12+34=", "xyz", "the cat sat on the mat; the cat"]


def _layout_generate(engine: LocalEngine, layout: str, params: SamplingParams) -> list[list]:
    """-> per prompt, its completions' (token ids, logprobs), run one request at a time, all at once, or n=3 each."""
    if layout == "batch1":
        groups = [engine.generate([p], params)[0] for p in GREEDY_PROMPTS]
    elif layout == "batch4":
        groups = engine.generate(GREEDY_PROMPTS, params)
    else:  # n3: three samples share each prompt's KV (cascade attention)
        groups = [engine.generate([p], dataclasses.replace(params, n=3))[0] for p in GREEDY_PROMPTS]
    return [[(c.token_ids, c.logprobs) for c in g] for g in groups]


def _spec_engine(target, tok, method: str, k: int, draft, **kw) -> LocalEngine:
    """A speculative engine; `draft_torch`: the draft model proposing through its PyTorch forward (the path
    for drafts the compiled kernel does not take), `draft`: through the kernel."""
    spec = SpecConfig("ngram" if method == "ngram" else "draft", k=k, draft_model=None if method == "ngram" else draft, **kw)
    eng = LocalEngine(target, tok, speculative=spec)
    if method == "draft":
        assert eng.draft.fused is not None
    if method == "draft_torch":
        eng.draft.fused = None
    return eng


@pytest.mark.parametrize("layout", ["batch1", "batch4", "n3"])
@pytest.mark.parametrize("k", [3, 8])
@pytest.mark.parametrize("method", ["ngram", "draft", "draft_torch"])
@pytest.mark.slow
def test_greedy_speculative_output_equals_plain_decoding_over_32_tokens(greedy_models, method, k, layout, one_thread):
    target, draft, tok = greedy_models
    params = SamplingParams(temperature=0, max_tokens=32, ignore_eos=True)
    plain = _layout_generate(LocalEngine(target, tok), layout, params)
    eng = _spec_engine(target, tok, method, k, draft)
    got = _layout_generate(eng, layout, params)
    for prompt, want_group, got_group in zip(GREEDY_PROMPTS, plain, got):
        for (want_ids, want_lps), (ids, lps) in zip(want_group, got_group, strict=True):
            assert len(ids) == 32
            assert ids == want_ids, (
                f"{method} k={k} {layout}: {prompt!r} diverges at token "
                f"{next(i for i, (a, b) in enumerate(zip(ids, want_ids)) if a != b)}"
            )
            torch.testing.assert_close(torch.tensor(lps), torch.tensor(want_lps), atol=1e-5, rtol=1e-5)
    m = eng.metrics()
    # both branches of the rule ran: some proposals accepted (multi-token steps), some rejected
    assert 0 < m["spec_accepted"] < m["spec_proposed"], m
    assert m["tokens_per_forward"] > 1.0


# -- sampled tokens after the first, one request at a time ------------------------------------------------------


def _chi2_sf(stat: float, dof: int) -> float:
    return float(torch.special.gammaincc(torch.tensor(dof / 2, dtype=torch.float64), torch.tensor(stat / 2, dtype=torch.float64)))


def _conditional_pvalues(model: CausalLM, prompt: list[int], seqs: torch.Tensor) -> list[float]:
    """seqs [N, L], N independent samples of L tokens after `prompt` -> one p-value per position j.

    Position j's test: O_i, how many samples emitted token i at j, against E_i = sum over samples of
    p(x_j = i | prompt, that sample's x_1..x_{j-1}), the target's exact conditional from one teacher-forced
    forward pass; Pearson's statistic over the cells, those with E_i < 5 pooled into one, with (cells - 1)
    degrees of freedom. With every sample's conditional the same this is the ordinary goodness-of-fit
    test; where they differ, O - E is a sum of independent categorical deviations whose covariance is
    at most that of the multinomial with the averaged probabilities, so the statistic is stochastically
    no larger than that chi-square (asymptotically) and the test is conservative.
    """
    n, length = seqs.shape
    ids = torch.cat([torch.tensor(prompt).expand(n, -1), seqs], 1)
    with torch.no_grad():
        p = torch.softmax(model(ids)[:, len(prompt) - 1 : -1].double(), -1)  # [N, L, V]: each token's distribution
    out = []
    for j in range(length):
        observed = torch.bincount(seqs[:, j], minlength=p.shape[-1]).double()
        expected = p[:, j].sum(0)
        small = expected < 5
        if small.any():
            observed = torch.cat([observed[~small], observed[small].sum()[None]])
            expected = torch.cat([expected[~small], expected[small].sum()[None]])
        stat = float(((observed - expected) ** 2 / expected).sum())
        out.append(_chi2_sf(stat, len(expected) - 1) if len(expected) > 1 else 1.0)
    return out


COPY_LAG = 24  # the copied text's length: every output position up to it copies a prompt token


def _copy_prompt(tok) -> list[int]:
    rng = random.Random(0)
    return tok.encode("".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(COPY_LAG)) + "|")


def _sample_one_at_a_time(engine: LocalEngine, prompt: list[int], n: int, length: int) -> torch.Tensor:
    """n samples of `length` tokens at T=1, each its own request (batch 1), seeded 0..n-1: deterministic."""
    rows = []
    for seed in range(n):
        c = engine.generate([prompt], SamplingParams(max_tokens=length, temperature=1.0, ignore_eos=True, seed=seed))[0][0]
        rows.append(c.token_ids)
    return torch.tensor(rows)


@pytest.mark.parametrize("method", ["ngram", "draft", "draft_torch"])
@pytest.mark.slow
def test_batch1_speculated_tokens_follow_the_target_distribution(method, one_thread):
    """Tokens 1..8 of requests sampled one at a time (3 drafts per step, so two or more speculative steps each)
    against the exact conditionals."""
    tok = char_tokenizer()
    target = copier_model(tok, COPY_LAG)
    draft = copier_model(tok, COPY_LAG, gap=5.5, seed=1)  # a less sure, differently biased copier: q != p
    prompt = _copy_prompt(tok)
    eng = _spec_engine(target, tok, method, 3, draft, ngram_min=1)
    length = 8
    seqs = _sample_one_at_a_time(eng, prompt, 400, length)
    m = eng.metrics()
    assert 0.2 < m["spec_acceptance_rate"] < 0.9 and m["tokens_per_forward"] > 1.5, m  # both branches, often
    pvals = _conditional_pvalues(target, prompt, seqs)
    assert min(pvals) > 1e-4 / length, [f"{p:.1e}" for p in pvals]


@pytest.mark.slow
def test_benchmarked_speculative_path_matches_the_exact_distribution(one_thread):
    """benchmarks/engine.py's speculative workload on a tiny copier: prompt lookup with k=8, ngram 4..2, T=1, n=1
    requests one at a time through one engine; all 24 positions against the exact conditionals."""
    tok = char_tokenizer()
    target = copier_model(tok, COPY_LAG)
    prompt = _copy_prompt(tok)
    eng = LocalEngine(target, tok, speculative=SpecConfig("ngram", k=8, ngram_max=4, ngram_min=2))  # as spec() configures it
    seqs = _sample_one_at_a_time(eng, prompt, 600, COPY_LAG)
    m = eng.metrics()
    assert m["tokens_per_forward"] > 2.5, m  # long accepted runs: the path the speedup figure measures
    assert m["spec_accepted"] < m["spec_proposed"]
    pvals = _conditional_pvalues(target, prompt, seqs)
    assert min(pvals) > 1e-4 / COPY_LAG, [f"{p:.1e}" for p in pvals]
