"""Autoregressive decoding: one token per forward. The baseline and the oracle of every test."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..loop import Acceptance, DecodeState, Draft
from ..sampling import logits_to_probs, sample
from ._chain import chain_acceptance, chain_draft, chain_logits


@dataclass(frozen=True)
class AR:
    name: ClassVar[str] = "ar"
    requires: ClassVar[frozenset] = frozenset()

    def start(self, state: DecodeState) -> None:
        pass

    def propose(self, state: DecodeState) -> Draft:
        return chain_draft(state, [[] for _ in range(state.batch)])

    def accept(self, state: DecodeState, draft: Draft, logits) -> Acceptance:
        committed = []
        for b in range(state.batch):
            if state.done[b]:
                committed.append([])
                continue
            p = logits_to_probs(chain_logits(draft, logits, b)[-1], state.params)
            committed.append([int(sample(p, state.generator))])
        return chain_acceptance(draft, committed, [0] * state.batch)
