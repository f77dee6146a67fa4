"""The decoders' attention masks as FlexAttention mask functions and block masks.

A mask function `mask_mod(b, h, q, kv) -> bool` (True = may attend) describes a mask without
materialising it; q and kv index one shared slot axis (cache slots, then the new ones). `dense`
materialises it as a (B, N, S) bool tensor (the form SDPA and the references take);
`block_mask` builds FlexAttention's `BlockMask`, which skips every fully masked tile of
`block_size` x `block_size` scores. That pays where most tiles are empty: long prefixes under
block-causal, windowed or grouped structure (`sparsity` says how much), not a short decode step.
"""
from __future__ import annotations

import torch


def causal(past: int = 0):
    """Query i (the i-th of the new slots, after `past` cached ones) sees slots <= past + i."""
    return lambda b, h, q, kv: kv <= q + past


def block_causal(block_ids: torch.Tensor):
    """Bidirectional inside a block, causal across blocks; block_ids (S,) non-decreasing
    (block diffusion blocks, LPD position-query groups)."""
    return lambda b, h, q, kv: block_ids[q] >= block_ids[kv]


def raster_order(positions: torch.Tensor, valid: torch.Tensor):
    """ZipAR next-set: a slot sees every live slot at an earlier raster position or its own,
    whatever order the slots were written in. positions, valid (B, S)."""
    return lambda b, h, q, kv: (positions[b, kv] <= positions[b, q]) & valid[b, kv]


def tree(parents: list[int]):
    """Tree drafts (lookahead verification, multi-draft): a node sees itself and its ancestors;
    parents[i] < i or -1 for a root."""
    from .reference import tree_mask
    seen = tree_mask(parents)
    return lambda b, h, q, kv: seen[q, kv]


def dense(mask_mod, batch: int, num_queries: int, num_keys: int, device=None) -> torch.Tensor:
    """(B, N, S) bool: the mask function evaluated on every (query, key) pair."""
    b = torch.arange(batch, device=device)[:, None, None]
    q = torch.arange(num_queries, device=device)[None, :, None]
    kv = torch.arange(num_keys, device=device)[None, None, :]
    h = torch.zeros((), dtype=torch.long, device=device)
    return mask_mod(b, h, q, kv).expand(batch, num_queries, num_keys)


def block_mask(mask_mod, batch: int, num_queries: int, num_keys: int, device="cpu", block_size: int = 128):
    """FlexAttention `BlockMask` of the mask function, shared across heads."""
    from torch.nn.attention.flex_attention import create_block_mask
    return create_block_mask(mask_mod, batch, None, num_queries, num_keys, device=device, BLOCK_SIZE=block_size)


def sparsity(mask: torch.Tensor, block_size: int = 128) -> float:
    """Fraction of block_size x block_size tiles of a dense (B, N, S) mask with no True entry:
    the share of attention work a block mask skips."""
    n, s = mask.shape[-2:]
    padded = torch.zeros(mask.shape[0], -(-n // block_size) * block_size, -(-s // block_size) * block_size,
                         dtype=torch.bool, device=mask.device)
    padded[:, :n, :s] = mask
    tiles = padded.unflatten(1, (-1, block_size)).unflatten(3, (-1, block_size)).any(4).any(2)
    return 1.0 - tiles.float().mean().item()
