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

from ...loop import Acceptance, DecodeState, Draft
from .base import FrameDecoder, by_row, frame_acceptance, frames_until_end, live_rows, sample_frames


@dataclass(frozen=True)
class Parallel(FrameDecoder):

    name: ClassVar[str] = "parallel"
    batch_independent: ClassVar[bool] = True    # each row's frames drawn from its own stream, sized by its own state

    def accept(self, state: DecodeState, draft: Draft, logits) -> Acceptance:
        rows = live_rows(state)
        drawn = sample_frames(state, draft, logits, rows, self.eos)                  # (M, K)
        # EOS on codebook 0 ends the row (the other heads' guesses at that slot mean nothing)
        return frame_acceptance(draft, by_row(state, rows, [frames_until_end([d], self.eos) for d in drawn]))
