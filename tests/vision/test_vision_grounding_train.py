"""Grounding training helpers: the hard-example share of the query draws, the block-objective mask,
scenes rendered in worker processes."""
import random

import numpy as np
import torch

from vision.grounding import data
from vision.grounding.train import sample_examples, train_mask


def test_hard_share_draws_more_multi_and_no_match_answers():
    scenes = [data.scene("train", i) for i in range(40)]
    pools = {"aabb": (scenes, None), "obb": (scenes, None)}

    def not_single(hard):
        draws = sample_examples(pools, 600, random.Random(0), 0.0, hard)
        assert all(t == "aabb" and 0 <= i < len(scenes) for t, i, _ in draws)
        return sum(len(q.targets) != 1 for _, _, q in draws) / len(draws)

    plain, hard = not_single(0.0), not_single(0.5)
    assert 0.1 < plain < 0.4 and hard > plain + 0.15, (plain, hard)


def test_train_mask_block_slots_see_the_past_and_each_other():
    m = train_mask(5, [3], 4, 9)           # 5 clean slots, one block of 4 starting at clean index 3, 1 pad
    assert torch.equal(m[:5, :5], torch.ones(5, 5, dtype=torch.bool).tril())
    assert m[5:8, :3].all() and not m[5:8, 3:5].any() and m[5:8, 5:8].all()
    assert not m[:5, 5:].any() and m[8, 8] and m[8].sum() == 1


def test_render_in_worker_processes_gives_the_same_scenes():
    from vision.grounding.train import render
    here, pooled = render("train", "obb", range(5, 25)), render("train", "obb", range(5, 25), workers=2)
    assert all(np.array_equal(a.image, b.image) and a.objects == b.objects for a, b in zip(here, pooled))
    assert len(pooled) == 20


def test_cell_targets_cover_the_targets_boxes():
    """Cells are 128/12 px wide: a box over x 0-32, y 0-21 holds the centres of the first 3 x 2
    cells; a box too small to hold a centre still marks the cell under its own centre."""
    from vision.grounding.train import cell_targets
    big = data.Obj("square", box=(0, 0, 32, 21))
    tiny = data.Obj("circle", box=(100, 100, 102, 102))      # centre (101, 101): cell row 9, column 9
    cells = cell_targets([("aabb", "q", [big, tiny]), ("aabb", "q", [])]).view(2, 12, 12)
    assert cells[0, :2, :3].eq(1).all() and cells[0, 9, 9] == 1 and cells[0].sum() == 7
    assert cells[1].sum() == 0                                  # "no match": an empty map


def test_cell_loss_trains_only_the_models_that_have_the_head(tmp_path):
    from vision.grounding.model import FEATURE_DIM, GroundingModel, QueryTokenizer, default_config
    from vision.grounding.train import losses, make_batch, tokenizer_source
    tok = QueryTokenizer.build(tokenizer_source(), data.all_query_texts())
    examples = [("aabb", "the red circle", [data.Obj("circle", "red", box=(10, 10, 40, 40))]),
                ("aabb", "the blue star", [])]
    batch, feats = make_batch(examples, tok), torch.randn(2, 144, FEATURE_DIM)
    torch.manual_seed(0)
    cfg = {**default_config(len(tok.bpe_ids), 32, 1, 2), "query_bpe_ids": tok.bpe_ids}
    plain, with_head = GroundingModel(cfg), GroundingModel({**cfg, "cell_head": True})
    assert plain.cell_head is None and losses(plain, feats, batch)[2] == 0
    causal, block, cell = losses(with_head, feats, batch)
    assert cell > 0 and torch.isfinite(causal + block + cell)
    cell.backward()
    assert with_head.cell_head.weight.grad.abs().sum() > 0 and with_head.proj[1].weight.grad.abs().sum() > 0
    with_head.save(tmp_path)
    (tmp_path / "tokenizer.json").write_bytes(tokenizer_source().read_bytes())
    assert GroundingModel.load(tmp_path).cell_head is not None
