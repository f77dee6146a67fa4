"""Codebook-parallel decoding: all K codebooks of a frame in one forward (the "parallel"
pattern of MusicGen, Copet et al. 2023, section 2.2), T + 1 forwards for T frames (prefill
included; the last one emits EOS on codebook 0).

Not exact as an approximation of the joint p(frame): codebooks of one frame are sampled
independently given the past (the model was trained with exactly this factorisation, so it is
the parallel-layout model's own distribution; its quality cost against the flattened model is
reported by `python -m speech.bench`).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

from ..loop import Acceptance, DecodeState, Draft
from ..sampling import logits_to_probs, sample
from ._frames import frame_acceptance, frame_draft, last_frame_logits, require_frames


@dataclass(frozen=True)
class Parallel:
    codebooks: int | None = None    # K; bound from the adapter's config
    bos: int | None = None
    eos: int | None = None
    pad: int | None = None

    name: ClassVar[str] = "parallel"
    requires: ClassVar[frozenset] = frozenset()

    def bind(self, model) -> "Parallel":
        return replace(self, **require_frames(self, model))

    def start(self, state: DecodeState) -> None:
        if self.codebooks is None:
            raise ValueError("parallel needs the codebook constants: decode through speech's TTS or call .bind(model)")

    def propose(self, state: DecodeState) -> Draft:
        return frame_draft(state, self.codebooks, self.pad)

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
