"""LPD on tiny random priors with position queries: the locality-aware schedule, one forward per
group, and every sampled cell equal to what the training layout (vision.position_queries) gives
for that cell, so decoding sees exactly what training showed the queries."""
import pytest
import torch

from tinymodels import tiny_prior

import suite
from suite.decoders.raster.lpd import LPD, group_sizes, lpd_order
from vision.position_queries import add_query_tokens, block_mask, query_loss


@pytest.fixture(scope="module")
def qprior():
    from vision.prior import ImagePrior
    p = tiny_prior(codebook=16, classes=3, grid=(4, 4))
    torch.manual_seed(1)
    return ImagePrior(p.model, add_query_tokens(p.model, p.meta))


def test_group_sizes():
    assert group_sizes(256, 20) == [1, 2, 4, 5, 7, 8, 10, 11, 12, 14, 15, 16, 17, 18, 18, 19, 19, 20, 20, 20]
    for cells, steps in ((16, 5), (256, 32), (9, 9), (64, 1), (1024, 48)):
        sizes = group_sizes(cells, steps)
        assert len(sizes) == steps and sum(sizes) == cells and sizes[0] == (1 if steps > 1 else cells) and min(sizes) >= 1
    with pytest.raises(ValueError, match="steps must be in 1..16"):
        group_sizes(16, 17)


def test_order_is_local_repulsive_and_seeded():
    sizes = group_sizes(256, 20)
    orders = [lpd_order(16, 16, sizes, torch.Generator().manual_seed(s)) for s in range(4)]
    for groups in orders:
        assert [len(g) for g in groups] == sizes
        assert sorted(sum(groups, [])) == list(range(256))
        seen = set(groups[0])
        for g in groups[1:]:
            # the group's best cell borders a generated one (locality) ...
            assert any(max(abs(g[0] // 16 - c // 16), abs(g[0] % 16 - c % 16)) == 1 for c in seen)
            seen |= set(g)
        # ... and the second cell of group 2 keeps out of the first one's repulsion radius (2)
        a, b = groups[1]
        assert max(abs(a // 16 - b // 16), abs(a % 16 - b % 16)) > 2
    assert orders[0] == lpd_order(16, 16, sizes, torch.Generator().manual_seed(0))
    assert orders[0] != orders[1]


def replay_logits(prior, prompt_token: int, groups, codes, scale=None):
    """Code logits of every query slot from one uncached forward over the training layout."""
    order = torch.tensor(sum(groups, []))
    k = prior.codebook_size
    offset = prior.config.extra["query_offset"]
    mask = block_mask([len(g) for g in groups])[None, None]
    pos = torch.cat([torch.zeros(1, dtype=torch.long), 1 + order, 1 + order])[None]

    def run(first):
        ids = torch.cat([torch.tensor([first]), codes[order], offset + order])[None]
        with torch.no_grad():
            return prior.model(input_ids=ids, position_ids=pos, attention_mask=mask).logits[0, 1 + len(order):, :k]
    cond = run(prompt_token)
    if scale is None:
        return order, cond
    unc = run(prior.config.extra["null_class_id"])
    return order, unc + scale * (cond - unc)


@pytest.mark.parametrize("scale", [None, 2.5])
def test_lpd_cells_match_the_training_layout(qprior, scale):
    """Greedy LPD over a ragged batch of orders: each cell is the argmax of its query in the
    training layout (block-causal over the decoded groups), with and without CFG."""
    labels = [0, 1, 2]
    prompt = torch.tensor([[qprior.class_token(c)] for c in labels])
    model = qprior if scale is None else suite.ClassifierFreeGuidance(
        qprior, scale, torch.full_like(prompt, qprior.config.extra["null_class_id"]))
    adapter, dec, state = suite.api.prepare(model, prompt, decoder=LPD(steps=5), max_new_tokens=16)
    for _ in suite.decode_steps(adapter, dec, state):
        pass
    assert state.stats.num_forwards == 5
    for b, label in enumerate(labels):
        codes = torch.tensor(state.new_tokens(b))
        order, logits = replay_logits(qprior, qprior.class_token(label), state.rows[b].plan.groups, codes, scale)
        assert torch.equal(logits.argmax(-1), codes[order]), f"row {b}"
    assert len({tuple(state.new_tokens(b)) for b in range(3)}) > 1


def test_lpd_samples_fill_the_grid_in_steps_forwards(qprior):
    prompt = torch.tensor([[qprior.class_token(1)]] * 4)
    for steps in (1, 3, 16):
        out = suite.generate(qprior, prompt, decoder=LPD(steps=steps), max_new_tokens=16, temperature=1.0, seed=2)
        assert out.stats.num_forwards == steps
        assert all(len(t) == 16 and all(0 <= x < 16 for x in t) for t in out.new_tokens)


def test_lpd_needs_position_queries_and_whole_grids(qprior):
    plain = tiny_prior()
    prompt = torch.tensor([[plain.class_token(0)]])
    with pytest.raises(ValueError, match="python -m vision.train lpd"):
        suite.generate(plain, prompt, decoder=LPD(), max_new_tokens=16)
    with pytest.raises(ValueError, match="max_new_tokens must be 16"):
        suite.generate(qprior, prompt, decoder=LPD(steps=4), max_new_tokens=8)


def test_query_objective_trains(qprior):
    """A few steps of the query loss lower it (the objective reaches the query embeddings)."""
    import copy
    model = copy.deepcopy(qprior.model).train()
    offset, k = qprior.config.extra["query_offset"], qprior.codebook_size
    groups = lpd_order(4, 4, group_sizes(16, 5), torch.Generator().manual_seed(0))
    orders = torch.tensor([sum(groups, [])] * 8)
    codes = torch.randint(0, 4, (8, 16))
    cls = torch.full((8,), qprior.class_token(0))
    mask = block_mask([len(g) for g in groups])
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(15):
        loss = query_loss(model, codes, cls, orders, offset, mask, k)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.8 * losses[0]


def test_farthest_point_fill():
    from suite.decoders.raster.lpd import _farthest
    assert _farthest([5], list(range(16)), 3, 4, None) == [15, 3, 12]     # from (1,1): far corner first
    picks = _farthest([], list(range(16)), 4, 4, torch.Generator().manual_seed(0))
    assert len(set(picks)) == 4 and min(max(abs(a // 4 - b // 4), abs(a % 4 - b % 4))
                                        for a in picks for b in picks if a != b) >= 2
