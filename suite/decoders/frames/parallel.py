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
from ...sampling import logits_to_probs, sample
from .base import FrameDecoder, code_uniforms, frame_acceptance, frames_until_end, last_frame_logits, only_head0_ends


@dataclass(frozen=True)
class Parallel(FrameDecoder):

    name: ClassVar[str] = "parallel"
    batch_independent: ClassVar[bool] = True    # each row's frames drawn from its own stream, sized by its own state

    def accept(self, state: DecodeState, draft: Draft, logits) -> Acceptance:
        def frame(b: int) -> list[tuple]:
            frame_logits = only_head0_ends(last_frame_logits(draft, logits, b), self.eos)   # (K, V)
            u = code_uniforms(state, [b], tuple(frame_logits.shape[:-1]))[0]
            drawn = sample(logits_to_probs(frame_logits, state.params), u).tolist()
            # EOS on codebook 0 ends the row (the other heads' guesses at that slot mean nothing)
            return frames_until_end([drawn], self.eos)
        return frame_acceptance(draft, state.per_live_row(frame))
