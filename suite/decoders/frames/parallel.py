"""Codebook-parallel decoding: all K codebooks of a frame in one forward (the "parallel"
pattern of MusicGen, Copet et al. 2023, section 2.2), T + 1 forwards for T frames (prefill
included; the last one emits EOS on codebook 0).

Not exact as an approximation of the joint p(frame): codebooks of one frame are sampled
independently given the past (the model was trained with exactly this factorisation, so it is
the parallel-layout model's own distribution; its quality cost against the flattened model is
reported by `python -m speech.bench`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ...loop import DecodeState, Draft
from .base import FrameDecoder, frames_until_end, sample_frames


@dataclass(frozen=True)
class Parallel(FrameDecoder):

    name: ClassVar[str] = "parallel"

    def next_frames(self, state: DecodeState, draft: Draft, logits, rows: list[int]) -> list[list[tuple]]:
        drawn = sample_frames(state, draft, logits, rows, self.eos)                  # (M, K)
        # EOS on codebook 0 ends the row (the other heads' guesses at that slot mean nothing)
        return [frames_until_end([d], self.eos) for d in drawn]
