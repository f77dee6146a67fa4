"""Hybrid box decoding: parallel by default, validated, re-decoded slot by slot when the check
fails (LocateAnything, NVIDIA 2026, arXiv 2605.27365, "Hybrid" mode: fall back to next-token
prediction on "format irregularity or spatial ambiguity").

Each block is first scored in one forward as in `parallel_box`. Its head token comes from the
clean causal slot, so it is always the exact AR token. The block is committed whole only when
`block_problem` finds nothing wrong: structure tokens in place, x0 < x1 and y0 < y1 (oriented: a
positive size and a unit angle vector), inside the image, and every slot's confidence at least
`confidence_floor` (coordinates: the probability mass within `coord_tolerance` grid values).
Otherwise only the head is committed and the rest of the block is decoded AR, one slot per
forward, after which parallel decoding resumes. A failed block costs its parallel forward plus
B-1 AR forwards. confidence_floor above 1 sends every block to AR: the output is then exactly
`ar`'s (a test checks this); confidence_floor 0 keeps only the format and geometry checks.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

from ..loop import Acceptance, DecodeState, Draft
from .block_diffusion import choose, keep_clean, row_logits
from .parallel_box import BoxLayout, block_problem, box_proposal, count_block, slot_confidence


@dataclass(frozen=True)
class HybridBox:
    confidence_floor: float = 0.5
    coord_tolerance: int = 15        # grid values (of 1000) around a coordinate counted as agreeing
    layout: Any = None               # BoxLayout; default: from the adapter config (bind)

    name: ClassVar[str] = "hybrid"
    requires: ClassVar[frozenset] = frozenset({"custom_mask"})

    def bind(self, adapter) -> "HybridBox":
        return self if self.layout is not None else dataclasses.replace(self, layout=BoxLayout.of(adapter))

    def start(self, state: DecodeState) -> None:
        if self.layout is None:
            raise ValueError("hybrid needs a box layout: bind it to a grounding adapter (decoder.bind(adapter))")
        if self.confidence_floor < 0 or self.coord_tolerance < 0:
            raise ValueError("confidence_floor and coord_tolerance must be >= 0")
        state.scratch["ar_left"] = [0] * state.batch
        state.scratch["fallback_reasons"] = {}

    def propose(self, state: DecodeState) -> Draft:
        return box_proposal(state, self.layout)

    def accept(self, state: DecodeState, draft: Draft, logits) -> Acceptance:
        committed = []
        ar_left = state.scratch["ar_left"]
        for b in range(state.batch):
            if state.done[b]:
                committed.append([])
                continue
            row = row_logits(draft, logits, b)                          # (1 + noisy, V)
            tokens, _ = choose(row, state)
            head = int(tokens[0])
            if ar_left[b] > 0:                                          # re-decoding slot by slot
                ar_left[b] -= 1
                committed.append([head])
                continue
            if head in state.eos_token_ids or tokens.shape[0] == 1:
                committed.append([head])
                continue
            count_block(state, "box_blocks")
            conf = slot_confidence(row, tokens, self.layout, self.coord_tolerance).tolist()
            problem = block_problem(tokens.tolist(), conf, self.layout, self.confidence_floor)
            if problem is None:
                committed.append(tokens.tolist())
                continue
            count_block(state, "box_fallbacks")
            reasons = state.scratch["fallback_reasons"]
            reasons[problem] = reasons.get(problem, 0) + 1
            ar_left[b] = self.layout.block_size - 1
            committed.append([head])
        return Acceptance(committed, keep_clean(draft, [0] * state.batch))
