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

from ..loop import Acceptance, DecodeState, Draft
from ..sampling import logits_to_probs, sample
from ._frames import FrameDecoder, frame_acceptance, last_frame_logits


@dataclass(frozen=True)
class Parallel(FrameDecoder):

    name: ClassVar[str] = "parallel"

    def accept(self, state: DecodeState, draft: Draft, logits) -> Acceptance:
        committed = []
        for b in range(state.batch):
            if state.done[b]:
                committed.append([])
                continue
            frame_logits = last_frame_logits(draft, logits, b).clone()                   # (K, V)
            frame_logits[1:, self.eos] = float("-inf")         # only codebook 0 may end the utterance
            probs = logits_to_probs(frame_logits, state.params)
            frame = sample(probs, state.generator).tolist()
            # EOS on codebook 0 ends the row (the other heads' guesses at that slot mean nothing)
            committed.append([(self.eos,) * self.codebooks] if frame[0] == self.eos else [tuple(frame)])
        return frame_acceptance(draft, committed)
