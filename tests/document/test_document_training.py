"""The block-diffusion training layout: masks and targets."""
import random

import torch

from document import data
from document.model import MASK, OCRModel, block_anchor, block_train_mask, default_config
from document.train import diffusion_batch, encode_batch


def test_block_size_one_is_plain_ar():
    n = 7
    m = block_train_mask(n, 1, 0)
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    assert m[:n, :n].equal(causal)
    assert not m[:n, n:].any()
    # every noisy slot is an anchor: it sees the clean past up to itself and nothing noisy but itself
    assert m[n:, :n].equal(causal)
    assert m[n:, n:].equal(torch.eye(n, dtype=torch.bool))


def test_blocks_are_bidirectional_inside_and_causal_across():
    n, bs, off = 10, 4, 2
    m = block_train_mask(n, bs, off)
    a = block_anchor(n, bs, off)
    assert a.tolist() == [0, 0, 2, 2, 2, 2, 6, 6, 6, 6]
    # noisy 4 (block anchored at 2) sees clean 0..2, noisy 3..5, not clean 3 nor noisy 6
    row = m[n + 4]
    assert row[:n].tolist() == [True, True, True] + [False] * 7
    assert row[n:].tolist() == [False, False, False, True, True, True, False, False, False, False]
    assert not m[:n, n:].any()                      # the clean stream never sees noisy slots


def test_diffusion_targets_only_where_unseen():
    model = OCRModel(default_config(data.CHARSET, data.MAX_CHARS, data.HEIGHT, data.WIDTH))
    ids = encode_batch(model, ["hello world, block diffusion", "x = 1"])
    inputs, positions, masks, targets, n = diffusion_batch(ids, random.Random(0))
    assert inputs.shape == (2, 2 * n) and masks.shape == (2, 1, 2 * n, 2 * n)
    noisy, t = inputs[:, n:], targets[:, n:]
    for b in range(2):
        for p in range(n - 1):
            if t[b, p] != -100 and p + 1 < n:
                # the target of noisy slot p is token p+1: masked in the input or in the next block
                assert noisy[b, p + 1] == MASK or masks[b, 0, n + p, n + p + 1] == 0
    assert (targets[:, :n] != -100).sum() == sum(len(s) + 1 for s in ["hello world, block diffusion", "x = 1"])
