"""Autoregressive decoding: one token per forward. The baseline and the oracle of every test."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ...loop import Acceptance, DecodeState, Draft
from ...random_streams import SAMPLE
from ...sampling import draw
from .base import chain_acceptance, chain_draft, last_chain_logits
from ..base import DecoderBase


@dataclass(frozen=True)
class AR(DecoderBase):
    name: ClassVar[str] = "ar"
    requires: ClassVar[frozenset] = frozenset()
    batch_independent: ClassVar[bool] = True    # a row's token is its stream's draw at its position (suite.scheduler)

    def start(self, state: DecodeState) -> None:
        pass

    def propose(self, state: DecodeState) -> Draft:
        return chain_draft(state, [[] for _ in range(state.batch)])

    def accept(self, state: DecodeState, draft: Draft, logits) -> Acceptance:
        """One token per live row, all rows in one sampling call, each with its row's uniform at
        the position it decides."""
        live = [b for b in range(state.batch) if not state.done[b]]
        committed = [[] for _ in range(state.batch)]
        if live:
            last = last_chain_logits(draft, logits, live)                                 # (R, V)
            u = None if state.params.greedy else state.streams.uniform(state.positions(live), SAMPLE, rows=live)
            for b, token in zip(live, draw(last, state.params, u).tolist()):
                committed[b] = [token]
        return chain_acceptance(draft, committed, [0] * state.batch)
