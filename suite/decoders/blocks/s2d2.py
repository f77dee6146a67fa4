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


from ...acceptance import accept_speculative
from ...loop import Acceptance, DecodeState, Draft
from ...random_streams import DRAFT
from ...sampling import logits_to_probs
from .block_diffusion import block_draft, check_blocks, choose, keep_clean, row_logits, slot_uniforms, with_mask_token
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
        committed, accepted = [], []
        meta = draft.meta
        for b in range(state.batch):
            if state.done[b]:
                committed.append([]), accepted.append(0)
                continue
            rows = row_logits(draft, logits, b)              # (1 + k + m, V)
            k = meta.num_chain[b]
            chain = draft.tokens[b, meta.num_pending[b]:meta.num_pending[b] + k]
            p = logits_to_probs(rows[:k + 1], state.params)
            head = len(state.tokens[b])                          # the chain decides positions head..
            v = accept_speculative(chain, None, p, state.streams.row_chain(b, head, k))
            committed.append(chain[:v.num_accepted].tolist() + [v.next_token])
            accepted.append(v.num_accepted)
            drafts = []
            if v.num_accepted == k and meta.num_noisy[b]:
                # noisy slot j (position head+j) predicts position head+j+1; the bonus fills head
                u = slot_uniforms(state, b, head + k + 1, meta.num_noisy[b], DRAFT)
                tokens, conf = choose(rows[k + 1:], state, u)
                drafts = list(zip(tokens.tolist(), conf.tolist()))
            state.rows[b].drafts = drafts
        return Acceptance(committed, keep_clean(draft, accepted))
