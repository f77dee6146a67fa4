"""Hybrid box decoding: parallel by default, validated, re-decoded token by token when the check
fails (LocateAnything, NVIDIA 2026, arXiv 2605.27365, "Hybrid" mode: fall back to next-token
prediction on "format irregularity or spatial ambiguity").

Each block is first scored in one forward as in `parallel_box`. Its head token comes from the
clean causal slot, so it is always the exact AR token. The block is committed whole only when
`block_problem` finds nothing wrong: structure tokens in place, x0 < x1 and y0 < y1 (oriented: a
positive size and a unit angle vector), inside the image, and every slot's confidence at least
`confidence_floor` (coordinates: the probability mass within `coord_tolerance` grid values).

Otherwise only the head is committed and the rest of the block is re-decoded AR. The failed
parallel slots are not thrown away: they are drafts. Each following forward scores the drafts
still ahead as a causal chain and keeps the prefix the AR model agrees with (suite's speculative
rule with point-mass drafts: exact AR tokens, in distribution when sampling), plus AR's own token
at the first disagreement; the slots after a disagreement get new drafts from the same forward,
AR's argmax at each chain slot (Jacobi-style: a coordinate that AR moves by one grid value rarely
changes the later ones), verified by the next forward. So a re-decoded block
is exactly what `ar` would emit after the same prefix, and every forward commits at least one
token. The forward that verifies a block's last drafts also carries the next block's MASK slots,
scored as in a parallel step: when the whole chain is accepted the next block comes out of the
same forward (its head from the chain's last slot, the exact AR distribution), otherwise they are
discarded. confidence_floor above 1 sends every block to AR: the output is then exactly `ar`'s
(a test checks this); confidence_floor 0 keeps only the format and geometry checks. Blocks that
pass are lossy as in `parallel_box`.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from ..base import DecoderBase
from ...acceptance import Verdict, accept_speculative
from ...loop import Acceptance, DecodeState, Draft
from ...sampling import draw, logits_to_probs
from ..blocks.block_diffusion import block_draft, clean_acceptance, row_logits, slot_uniforms
from .parallel_box import BoxLayout, block_problem, slot_confidence


FALLBACK = "fallback:"      # stats event per reason a block went to AR: fallback:geometry, ...


def fallback_reasons(events: dict[str, int]) -> dict[str, int]:
    """reason -> how many blocks it sent to AR, from a DecodeStats' events."""
    return {k[len(FALLBACK):]: v for k, v in events.items() if k.startswith(FALLBACK)}


@dataclass
class HybridRow:
    ar_left: int = 0                                    # slots of the current block still to decode AR
    verify: list[int] = field(default_factory=list)    # drafts of those slots still to verify (failed parallel slots)


@dataclass(frozen=True)
class HybridBox(DecoderBase):
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
        state.rows = [HybridRow() for _ in range(state.batch)]

    def propose(self, state: DecodeState) -> Draft:
        """Per row: the queued drafts as a causal chain, plus the next block's B-1 MASKs when the
        chain ends the block; else B-1 MASKs (a parallel step)."""
        B = self.layout.block_size
        chains, noisy = [], []
        for b, r in enumerate(state.rows):
            room = state.room(b) - 1 if not state.done[b] else 0
            chain = r.verify[:max(0, room)]                  # done rows have no room: no chain
            r.verify = chain
            if state.done[b] or (chain and len(chain) < r.ar_left) or (not chain and r.ar_left > 0):
                n = 0                                 # done, a chain inside the block, or a plain AR step
            else:                                     # the chain (if any) ends the block: next block's MASKs
                n = max(0, min(B - 1, room - len(chain)))
            chains.append(chain)
            noisy.append([self.layout.mask_token_id] * n)
        return block_draft(state, chains, noisy)

    def accept(self, state: DecodeState, draft: Draft, logits) -> Acceptance:
        committed, kept = [], []
        for b, r in enumerate(state.rows):
            kept.append(0)
            if state.done[b]:
                committed.append([])
                continue
            row = row_logits(draft, logits, b)                          # (1 + chain + noisy, V)
            if r.verify:
                chain = r.verify
                out, kept[b], whole = self._verify(state, b, row)
                if whole and r.ar_left == 0 and draft.meta.num_noisy[b] > 0:
                    # the block is complete and the next one was scored in the same forward
                    kept[b] = len(chain)
                    out = out + self._parallel(state, b, row[len(chain):], len(state.tokens[b]) + len(out))
                committed.append(out)
                continue
            if r.ar_left > 0:                                           # re-decoding slot by slot
                r.ar_left -= 1
                committed.append([int(draw(row[0], state.params, slot_uniforms(state, b, len(state.tokens[b]), 1)[0]))])
                continue
            committed.append(self._parallel(state, b, row, len(state.tokens[b])))
        return clean_acceptance(draft, committed, kept)

    def _parallel(self, state: DecodeState, b: int, row: torch.Tensor, first: int) -> list[int]:
        """A parallel step from (1 + noisy, V) logits, slot i deciding position first + i: the end
        token alone, or a checked block."""
        tokens = draw(row, state.params, slot_uniforms(state, b, first, row.shape[0])).tolist()
        if tokens[0] in state.eos_token_ids or len(tokens) == 1:
            return tokens[:1]
        return self._check_block(state, b, row, tokens)

    def _check_block(self, state: DecodeState, b: int, row: torch.Tensor, tokens: list[int]) -> list[int]:
        """Commit a valid parallel block whole; else commit its head and queue the rest for verification."""
        state.stats.count("box_blocks")
        # a floor of 0 never rejects a confidence: skip computing them
        conf = slot_confidence(row, tokens, self.layout, self.coord_tolerance) if self.confidence_floor > 0 else None
        problem = block_problem(tokens, conf, self.layout, self.confidence_floor)
        if problem is None:
            return tokens
        state.stats.count("box_fallbacks")
        state.stats.count(FALLBACK + problem)
        state.rows[b].verify = tokens[1:]
        state.rows[b].ar_left = self.layout.block_size - 1
        return tokens[:1]

    def _verify(self, state: DecodeState, b: int, row: torch.Tensor) -> tuple[list[int], int, bool]:
        """(tokens to commit, chain slots whose K/V stays, whole chain accepted): the verified
        prefix of the queued drafts and AR's token at the first disagreement; the slots after it
        are queued again with new drafts. No bonus token after a fully accepted chain (the next
        block's head comes from the MASK-carrying forward, `accept`)."""
        r = state.rows[b]
        chain = r.verify
        argmax = row[:len(chain) + 1].argmax(-1).tolist()               # slot i predicts chain[i]
        if state.params.greedy:       # the speculative rule with one-hot p: keep what AR's argmax agrees with
            k = next((i for i, (c, a) in enumerate(zip(chain, argmax)) if c != a), len(chain))
            v = Verdict(k, argmax[k])
        else:
            probs = logits_to_probs(row[:len(chain) + 1], state.params)
            v = accept_speculative(torch.tensor(chain, dtype=torch.long, device=probs.device), None, probs,
                                   state.streams.row_chain(b, len(state.tokens[b]), len(chain)))
        whole = v.num_accepted == len(chain)
        out = chain[:v.num_accepted] + ([] if whole else [v.next_token])
        # the drafts after a disagreement become AR's own guesses from this forward (slot j's
        # argmax given chain[:j]: one wrong value in the context rarely changes the later ones;
        # Jacobi-style), a better draft than the parallel slots'; they are verified like any draft
        r.verify = [] if whole else argmax[v.num_accepted + 1:len(chain)]
        r.ar_left = max(0, r.ar_left - len(out))
        # the last committed token must stay uncached (the next forward predicts from its slot):
        # a fully accepted chain gives up the K/V of its last slot, to be recomputed next forward
        return out, v.num_accepted if not whole else v.num_accepted - 1, whole
