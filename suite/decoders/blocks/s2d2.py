"""S2D2: self-speculative decoding for block diffusion (seed paper E5 in docs/reference/seed-papers.md).

Paper idea: "a block-diffusion model becomes autoregressive when the block size is reduced to one",
so one model drafts a block in parallel (diffusion mode) and verifies it (AR mode, "a local
sequence-level critic"); "lightweight routing policies" decide when verifying is worth the cost.
The paper's acceptance is relaxed (lossy, quality-improving); this file verifies exactly.

Here one forward does both, on the layout of `block_diffusion` (see that file): the row's pending
clean tokens, then the previous forward's block-diffusion drafts as clean causal slots (the AR
mode scores them: accept the longest prefix that matches, by the speculative rule with point-mass
drafts, so the output equals `ar` exactly under greedy decoding and in distribution when
sampling), then B-1 noisy slots after the drafts that produce the next drafts. The noisy slots
are conditioned on the drafts, so their predictions are kept only when every draft was accepted.

Routing rule: a draft is cut before its first token whose block-diffusion confidence is below
`route_threshold` (a low-confidence draft token is likely rejected and only lengthens the
forward); with no draft the forward is one AR step plus the noisy block.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import torch

import kernels

from ...loop import Acceptance, DecodeState, Draft
from ...random_streams import DRAFT
from ...sampling import logits_to_probs
from .block_diffusion import (BlockMeta, block_draft, check_blocks, choose, clean_acceptance, row_logits, slot_uniforms,
                              with_mask_token)
from ..base import DecoderBase


@dataclass
class S2D2Row:
    drafts: list[tuple[int, float]] = field(default_factory=list)   # (token, confidence) from the last noisy block


@dataclass(frozen=True)
class S2D2(DecoderBase):
    block_size: int = 8
    route_threshold: float = 0.5
    mask_token_id: int | None = None   # default: the adapter config's extra["mask_token_id"]

    name: ClassVar[str] = "s2d2"
    requires: ClassVar[frozenset] = frozenset({"custom_mask"})
    batch_independent: ClassVar[bool] = True    # rows draw from their own streams, size from their own state

    def bind(self, adapter) -> "S2D2":
        return with_mask_token(self, adapter)

    def start(self, state: DecodeState) -> None:
        check_blocks(self)
        state.rows = [S2D2Row() for _ in range(state.batch)]

    def propose(self, state: DecodeState) -> Draft:
        chains, noisy = [], []
        for b in range(state.batch):
            if state.done[b]:
                chains.append([]), noisy.append([])
                continue
            room = state.room(b)
            chain = []
            for tok, conf in state.rows[b].drafts[:max(0, room - 1)]:
                if conf < self.route_threshold:
                    break
                chain.append(tok)
            n = max(0, min(self.block_size - 1, room - 1 - len(chain)))
            chains.append(chain)
            noisy.append([self.mask_token_id] * n)
        return block_draft(state, chains, noisy)

    def accept(self, state: DecodeState, draft: Draft, logits) -> Acceptance:
        """Every live row's chain verified in one batched speculative rule, its next drafts chosen
        from the noisy block (kept where the whole chain passed): one host read for both."""
        meta: BlockMeta = draft.meta
        live = [b for b in range(state.batch) if not state.done[b]]
        dev = logits.device
        width = max((meta.num_chain[b] for b in live), default=0)
        lengths = torch.tensor([0 if state.done[b] else meta.num_chain[b] for b in range(state.batch)], device=dev)
        pending = torch.tensor(meta.num_pending, device=dev)
        span = torch.arange(width + 1, device=dev)
        # row b's chain: the logits of its last pending slot and its k chain slots, the chain's tokens
        slots = ((pending - 1 - draft.logits_from).clamp(min=0)[:, None] + span).clamp(max=logits.shape[1] - 1)
        p = logits_to_probs(logits.gather(1, slots[..., None].expand(-1, -1, logits.shape[-1])), state.params)
        guesses = draft.tokens.gather(1, (pending[:, None] + span[:width]).clamp(max=draft.tokens.shape[1] - 1))
        u, u_next = state.streams.chain(state.positions(), width)        # the chain decides positions head..
        accepted, following = kernels.op("speculative_accept", dev.type)(guesses, None, p, u, u_next, lengths)
        noisy = [self._next_drafts(state, draft, logits, b) for b in live if meta.num_noisy[b]]
        read = iter(torch.cat([accepted.double(), following.double()]
                              + [x.double() for pair in noisy for x in pair]).tolist())   # the step's one host sync
        accepted_ = [int(next(read)) for _ in range(state.batch)]
        following_ = [int(next(read)) for _ in range(state.batch)]
        committed, kept = [[] for _ in range(state.batch)], [0] * state.batch
        for b in live:
            k, a = meta.num_chain[b], accepted_[b]
            chain = [tok for tok, _ in state.rows[b].drafts[:k]]
            committed[b], kept[b] = chain[:a] + [following_[b]], a
            drafts = []
            if meta.num_noisy[b]:
                m = meta.num_noisy[b]
                tokens, conf = [int(next(read)) for _ in range(m)], [next(read) for _ in range(m)]
                if a == k:            # the noisy slots saw the whole chain: their drafts stand
                    drafts = list(zip(tokens, conf))
            state.rows[b].drafts = drafts
        return clean_acceptance(draft, committed, kept)

    def _next_drafts(self, state: DecodeState, draft: Draft, logits, b: int) -> tuple:
        """Row b's next drafts from its noisy block: tokens and confidences (m,), on the device. Noisy
        slot j (position head+k+j) predicts position head+k+j+1; the bonus fills head+k."""
        meta: BlockMeta = draft.meta
        k, head = meta.num_chain[b], len(state.tokens[b])
        u = slot_uniforms(state, b, head + k + 1, meta.num_noisy[b], DRAFT)
        return choose(row_logits(draft, logits, b)[k + 1:], state, u)
