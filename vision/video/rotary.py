"""Frame-aware rotary positions for the video prior, installed as a module swap of the Llama
model's `rotary_emb` (transformers' code is untouched).

The layout's 1-D position id p (prompt at 0, cell j at 1 + j) splits as p = t * cells + s: frame
t, and s the slot inside it (the frame-start slot at 0, cell j at 1 + j) -- exactly where the
image prior's class token and cells sit. Every frequency pair but the lowest rotates by s, as
the image prior learnt, so "the same cell one frame back" is a small offset that the image
prior's neighbour heads already read; the lowest pairs (which barely turn over one image)
rotate by t * angle instead, so a head can tell frame t-1 from frame t. Positions stay plain
integers, so every decoder, the cache and the mask are unchanged.
"""
from __future__ import annotations

import math

import torch
from torch import nn

SCHEME = "frame_rotary"
FRAME_ANGLES = (math.pi / 2, math.pi / 4)     # radians per frame of the lowest frequency pairs


class FrameRotary(nn.Module):
    """Drop-in for `LlamaRotaryEmbedding`: forward(x, position_ids) -> (cos, sin)."""

    def __init__(self, inv_freq: torch.Tensor, cells: int, frame_angles=FRAME_ANGLES):
        super().__init__()
        self.cells = cells
        self.inv_freq = nn.Buffer(inv_freq.detach().clone().float(), persistent=False)
        self.frame_angles = nn.Buffer(torch.tensor(frame_angles, dtype=torch.float), persistent=False)

    def forward(self, x, position_ids):
        t = position_ids.div(self.cells, rounding_mode="floor")
        s = position_ids - t * self.cells
        inv = self.inv_freq.to(x.device)
        n = len(self.frame_angles)
        freqs = torch.cat([s[..., None].float() * inv[:len(inv) - n],
                           t[..., None].float() * self.frame_angles.to(x.device)], -1)
        emb = torch.cat((freqs, freqs), -1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


def install(model, cells: int, positions: dict | None) -> None:
    """Swap `model`'s rotary module for the scheme recorded in video_prior.json's "positions"
    (None, the older weights: 1-D positions, nothing to do)."""
    if positions is None:
        return
    if positions.get("scheme") != SCHEME:
        raise ValueError(f"unknown video prior position scheme {positions.get('scheme')!r}")
    old = model.model.rotary_emb
    model.model.rotary_emb = FrameRotary(old.inv_freq, cells, positions["frame_angles"]).to(old.inv_freq.device)


def meta(frame_angles=FRAME_ANGLES) -> dict:
    """The video_prior.json entry of this scheme."""
    return {"scheme": SCHEME, "frame_angles": [float(a) for a in frame_angles]}
