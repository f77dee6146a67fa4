"""FlexAttention mask functions equal the dense masks the decoders build, and flex attention
under their block masks equals SDPA under the dense masks (CPU, eager)."""
import warnings

import torch
import torch.nn.functional as F

from kernels import flex_masks, reference


def test_mask_functions_equal_the_dense_references():
    assert torch.equal(flex_masks.dense(flex_masks.causal(3), 1, 4, 7)[0], reference.causal_mask(4, past=3))
    sizes = [3, 1, 4, 2]
    ids = torch.repeat_interleave(torch.arange(4), torch.tensor(sizes))
    assert torch.equal(flex_masks.dense(flex_masks.block_causal(ids), 1, 10, 10)[0], reference.block_causal_mask(sizes))
    parents = [-1, 0, 1, 0, 3, -1]
    assert torch.equal(flex_masks.dense(flex_masks.tree(parents), 1, 6, 6)[0], reference.tree_mask(parents))


def test_raster_order_sees_earlier_positions_whatever_the_slot_order():
    positions = torch.tensor([[0, 1, 5, 2, 6, 3]])   # ZipAR writes row 1 (5, 6) before row 0 ends (2, 3)
    valid = torch.tensor([[True, True, True, True, True, False]])
    mask = flex_masks.dense(flex_masks.raster_order(positions, valid), 1, 6, 6)[0]
    expected = (positions[0][None, :] <= positions[0][:, None]) & valid[0][None, :]
    assert torch.equal(mask, expected)
    assert mask[2].tolist() == [True, True, True, True, False, False]   # position 5 sees 0, 1, 2 and itself


def test_flex_attention_under_block_masks_equals_sdpa():
    from torch.nn.attention.flex_attention import flex_attention
    g = torch.Generator().manual_seed(0)
    n = 256
    q, k, v = (torch.randn(2, 2, n, 16, generator=g) for _ in range(3))
    positions = torch.randperm(n, generator=g).expand(2, n)
    valid = torch.rand(2, n, generator=g) > 0.1
    valid[:, positions[0].argmin()] = True                             # every query sees position 0
    for mask_mod in (flex_masks.causal(), flex_masks.block_causal(torch.arange(n) // 32),
                     flex_masks.raster_order(positions, valid)):
        dense = flex_masks.dense(mask_mod, 2, n, n)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")                            # eager flex on CPU warns
            out = flex_attention(q, k, v, block_mask=flex_masks.block_mask(mask_mod, 2, n, n, block_size=64))
        ref = F.scaled_dot_product_attention(q, k, v, attn_mask=dense[:, None])
        assert (out - ref).abs().max() < 1e-5


def test_sparsity_counts_empty_tiles():
    causal = flex_masks.dense(flex_masks.causal(), 1, 512, 512)
    assert abs(flex_masks.sparsity(causal, 128) - 6 / 16) < 1e-9       # 4x4 tiles, 6 above the diagonal
    blocks = flex_masks.dense(flex_masks.block_causal(torch.arange(512) // 128), 1, 512, 512)
    assert abs(flex_masks.sparsity(blocks, 128) - 6 / 16) < 1e-9
