"""Clips <-> per-frame codes with the shipped image tokenizer (vision/weights/tokenizer)."""
from __future__ import annotations

import os

import torch

from ..data import to_tensor

VISION_WEIGHTS = os.path.join(os.path.dirname(os.path.dirname(__file__)), "weights")


def encode_clips(tokenizer, clips, batch: int = 128) -> torch.Tensor:
    """(N, T, S, S, 3) uint8 clips -> (N, T, H, W) codes (on the CPU)."""
    n, t = clips.shape[:2]
    frames = clips.reshape(n * t, *clips.shape[2:])
    device = next(tokenizer.vq.parameters()).device
    codes = [tokenizer.encode(to_tensor(frames[i:i + batch]).to(device)).cpu() for i in range(0, len(frames), batch)]
    codes = torch.cat(codes)
    return codes.reshape(n, t, *codes.shape[1:])
