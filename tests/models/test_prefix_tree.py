"""Prefix trees: every target is predicted from the state of the token before it, and the shared-prefix
logprobs (and their gradients) equal the padded rows' at every wanted target."""

import pytest
import torch

from posttrain.models import CausalLM, ModelConfig
from posttrain.models.logprobs import chunked_logprobs, shared_prefix_logprobs
from posttrain.models.prefix_tree import layout_costs, prefix_trees


def _model(model_type="llama", seed=0):
    cfg = ModelConfig(vocab_size=48, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, model_type=model_type)
    m = CausalLM(cfg)
    m.init_weights(torch.Generator().manual_seed(seed))
    return m


def _groups(seed=1, prompts=(5, 3, 6, 1), n=4, longest=7):
    """GRPO-shaped rows: per group one prompt and n completions of random lengths (one of them starting like
    the one before, so a common prefix can reach into the sampled tokens), right-padded, mask on completions."""
    g = torch.Generator().manual_seed(seed)
    rows, groups, starts = [], [], []
    for gi, p in enumerate(prompts):
        prompt = torch.randint(1, 48, (p,), generator=g)
        previous = None
        for k in range(n):
            comp = torch.randint(1, 48, (int(torch.randint(1, longest, (1,), generator=g)),), generator=g)
            if k == 1 and previous is not None:
                comp[0] = previous[0]
            previous = comp
            rows.append(torch.cat([prompt, comp]))
            groups.append(gi)
            starts.append(p)
    width = max(len(r) for r in rows)
    ids = torch.zeros(len(rows), width, dtype=torch.long)
    mask = torch.zeros(len(rows), width - 1)
    for i, (r, p) in enumerate(zip(rows, starts)):
        ids[i, : len(r)] = r
        mask[i, p - 1 : len(r) - 1] = 1.0
    return ids, torch.tensor([len(r) for r in rows]), torch.tensor(groups), mask


def test_every_target_is_predicted_from_the_token_before_it_at_its_own_position():
    for seed in range(5):
        ids, lengths, groups, mask = _groups(seed)
        t = prefix_trees(ids, lengths, groups, mask)
        assert t.targets.numel() == int(mask.sum())  # every wanted target, once
        assert torch.equal(t.targets, ids[t.rows, t.cols + 1])
        flat_ids, flat_pos = t.ids.reshape(-1), t.positions.reshape(-1)
        assert torch.equal(flat_ids[t.context], ids[t.rows, t.cols])  # the context token is the one before
        assert torch.equal(flat_pos[t.context], t.cols)  # ... at the position it has in its own row
        # each group's tree holds its prefix once and every row's rest: fewer tokens than the padded rows
        assert int((t.branches >= 0).sum()) == sum(p + sum(int(lengths[r]) - p for r in (groups == g).nonzero())
                                                   for g, p in enumerate(t.prefix_lengths))
        assert int((t.branches >= 0).sum()) < int(lengths.sum())


def test_the_common_prefix_reaches_into_identical_sampled_tokens():
    ids = torch.tensor([[1, 2, 3, 4, 5], [1, 2, 3, 4, 6], [1, 2, 9, 9, 0]])
    lengths, groups = torch.tensor([5, 5, 4]), torch.tensor([0, 0, 1])
    mask = torch.tensor([[0, 1, 1, 1], [0, 1, 1, 1], [0, 1, 1, 0]], dtype=torch.float)
    t = prefix_trees(ids, lengths, groups, mask)
    assert t.prefix_lengths == [4, 4]  # rows 0 and 1 agree on 4 tokens; a group of one row is all prefix
    assert t.ids[0].tolist() == [1, 2, 3, 4, 5, 6] and t.branches[0].tolist() == [0, 0, 0, 0, 1, 2]
    assert t.positions[0].tolist() == [0, 1, 2, 3, 4, 4]  # both last tokens sit at position 4


@pytest.mark.parametrize("model_type", ["llama", "qwen3"])
@pytest.mark.parametrize("chunk", [5, 256])
@pytest.mark.slow
def test_shared_prefix_logprobs_and_gradients_equal_the_padded_rows(model_type, chunk):
    m = _model(model_type)
    ids, lengths, groups, mask = _groups()
    ref, ref_ent = chunked_logprobs(m, ids, 0.7, chunk, entropy=True)
    (ref * mask).sum().backward()
    ref_grads = {n: p.grad.clone() for n, p in m.named_parameters()}
    m.zero_grad()
    got, got_ent = shared_prefix_logprobs(m, ids, lengths, groups, mask, 0.7, chunk, entropy=True)
    (got * mask).sum().backward()
    assert float(((got - ref) * mask).detach().abs().max()) < 1e-5
    assert float(((got_ent - ref_ent) * mask).abs().max()) < 1e-5
    assert float((got * (1 - mask)).detach().abs().max()) == 0.0  # unwanted positions come back 0
    for name, p in m.named_parameters():
        assert torch.allclose(p.grad, ref_grads[name], atol=1e-5), name


def test_the_costs_favour_trees_for_short_completions_and_padding_for_long_ones():
    m = _model()
    per_token = sum(p.numel() for layer in m.model.layers for p in layer.parameters())
    # a 7-token prompt and 16 4-token answers
    flat, tree = layout_costs(torch.tensor([11] * 16), [7 + 16 * 4], per_token, 32, 2)
    assert tree < 0.6 * flat
    # a 2-token prompt and 8 200-token answers
    flat, tree = layout_costs(torch.tensor([202] * 8), [2 + 8 * 200], per_token, 32, 2)
    assert tree > flat  # one 1602-token row attends over 8x the pairs of eight 202-token rows


def _graph_ops(t: torch.Tensor) -> set[str]:
    seen, stack, names = set(), [t.grad_fn], set()
    while stack:
        fn = stack.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        names.add(type(fn).__name__)
        stack.extend(f for f, _ in fn.next_functions)
    return names


def test_the_shared_states_gather_their_branches_gradients_without_indexing():
    """A state shared by several branches receives several gradients. Indexing's backward (`IndexBackward0`: an
    index_put with accumulate) adds them in an order that varies from run to run with 2 threads on a busy CPU
    (measured: 29 of 200 repeats gave other bits, benchmarks/RESULTS.md), which made the quickstart's figures move
    with machine load; index_select's backward (index_add) is the same sum in a fixed order."""
    m = _model()
    ids, lengths, groups, mask = _groups()
    logp, _ = shared_prefix_logprobs(m, ids, lengths, groups, mask)
    ops = _graph_ops(logp)
    assert "IndexSelectBackward0" in ops and "IndexBackward0" not in ops, sorted(ops)


def test_the_shared_prefix_gradients_repeat_bit_for_bit_on_a_busy_cpu():
    """The other side: 2 torch threads with another thread computing beside them, the same gradients every time."""
    import hashlib
    import threading

    m = _model()
    ids, lengths, groups, mask = _groups(prompts=(9, 7, 12, 3, 8, 5), n=8, longest=12)
    busy, stop = torch.randn(256, 256), threading.Event()
    worker = threading.Thread(target=lambda: [(busy @ busy).sum() for _ in iter(stop.is_set, True)], daemon=True)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    worker.start()
    try:
        digests = set()
        for _ in range(20):
            m.zero_grad()
            logp, _ = shared_prefix_logprobs(m, ids, lengths, groups, mask)
            (logp * mask).sum().backward()
            digests.add(hashlib.sha256(b"".join(p.grad.numpy().tobytes() for p in m.parameters())).hexdigest())
    finally:
        stop.set()
        worker.join()
        torch.set_num_threads(threads)
    assert len(digests) == 1
