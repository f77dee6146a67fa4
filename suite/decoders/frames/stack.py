"""Frame stacking: the backbone predicts S = 2 frames per forward (multi-frame prediction, as in
VALL-E 2's grouped code modeling, Chen et al. 2024, and multi-token prediction heads, Gloeckle
et al. 2024): at step i the last state emits frames 2i and 2i + 1 with two sets of Q heads, and
both frames are fed back together in the next forward. floor(T / 2) + 1 forwards for T frames
(prefill included; the EOS marker is a frame too) instead of `parallel`'s T + 1: half the
backbone forwards again.

Not exact: the second frame is sampled without seeing the first (and, as in `parallel`, the
codebooks of a frame independently). This is the stacked heads' own factorisation; its quality
cost against `parallel` is reported by `python -m speech.bench`. EOS on codebook 0 of either
frame ends the row (the frames after it are dropped).
The adapter's forward returns logits (B, N', S, Q, V) (speech: FrameTTSAdapter(model, output="stack")).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ...loop import DecodeState, Draft
from .base import FrameDecoder, frames_until_end, sample_frames


@dataclass(frozen=True)
class Stack(FrameDecoder):

    name: ClassVar[str] = "stack"
    output: ClassVar[str] = "stack"

    def next_frames(self, state: DecodeState, draft: Draft, logits, rows: list[int]) -> list[list[tuple]]:
        drawn = sample_frames(state, draft, logits, rows, self.eos)                  # (M, S, Q)
        return [frames_until_end(d, self.eos) for d in drawn]
