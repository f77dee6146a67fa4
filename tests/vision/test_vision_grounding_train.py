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
