"""CTC-drafted self-speculative ASR (seed paper D2 in docs/reference/seed-papers.md, "CTC-drafted
self-speculative ASR": entropy-gated acceptance of the greedy CTC hypothesis, else one-pass
verification by the attention/LLM decoder, else AR resume from the accepted prefix). The CTC
branch's one-pass hypothesis is the draft, the recogniser's own attention decoder the target.
Verification is the strict speculative rule by default; `min_ratio` < 1 relaxes it as the paper does.

Per row, the caller supplies the CTC hypothesis (token ids) and the entropies of its frames as
`RequestInputs(ctc=...)` (`ctc_draft` builds one from the row's CTC log-probabilities). Any model with a CTC head can draft for its own decoder:
speech's recogniser, and document's OCR model (its auxiliary CTC head over the encoder columns).
1. Gate: when the mean frame entropy is below `max_entropy` nats, the CTC hypothesis is
   committed as is (plus EOS) by `start`, before any forward: no decoder forward at all.
2. Otherwise the whole hypothesis + EOS is scored in ONE forward (with the prefill) by the
   attention decoder and its longest agreeing prefix is kept, plus the decoder's own next token
   (greedy: argmax; sampling: speculative sampling with a point-mass draft, lossless).
3. From the first rejection the row continues autoregressively (one token per forward), or, with
   `realign=True`, the rest of the CTC hypothesis is re-aligned after the decoder's own token (a
   substitution, or a CTC insertion when that token equals the next hypothesis token) and verified
   again in the next forward: one wrong character then costs one extra forward, not the rest of
   the utterance. Any draft is verified the same way, so realigning keeps the result unchanged.
Exact with respect to `ar` when the gate is off (max_entropy=0) and min_ratio=1: steps 2-3 are
then lossless verification, with or without `realign`. The gate and a relaxed min_ratio < 1 (the paper's relaxed acceptance
on token likelihoods, greedy only) are lossy by design; the bench reports their CER cost.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from ...acceptance import Verdict
from ...inputs import CTCHypothesis
from ...loop import Acceptance, DecodeState, Draft
from ..base import DecoderBase
from .base import (chain_acceptance, chain_draft, chain_logits, chain_probs, greedy_chain_verdicts, room_for_guesses,
                   speculative_chain_verdicts)


@dataclass
class CTCSpeculativeRow:
    draft: list[int]          # the CTC hypothesis + EOS (realigned after a rejection with `realign`)
    rejected: bool = False    # a draft token was rejected: the row continues autoregressively


@dataclass(frozen=True)
class CTCSpeculative(DecoderBase):
    max_entropy: float = 0.65    # nats (mean over frames); 0 disables the gate
    min_ratio: float = 1.0       # greedy relaxed acceptance: keep a draft token whose probability is at
                                 # least min_ratio x the top one's; 1.0 = strict (exact w.r.t. ar)
    realign: bool = False        # after a rejection, re-draft the rest of the CTC hypothesis (else plain AR)
    max_guesses: int = 0         # at most this many hypothesis tokens verified per forward (0: the whole rest);
                                 # a row keeps drafting while its guesses are accepted (a batch's forward is
                                 # as wide as its widest row: a cap keeps rows gone autoregressive from
                                 # paying for one row's long draft)

    name: ClassVar[str] = "ctc_speculative"
    requires: ClassVar[frozenset] = frozenset()
    batch_independent: ClassVar[bool] = True    # rows draw from their own streams, size from their own state

    def start(self, state: DecodeState) -> Acceptance:
        """Rows whose hypothesis passes the gate commit it whole before any forward."""
        ctc = state.inputs.rows("ctc", state.batch, self.name,
                                "decode through speech.load_asr() / document.load_ocr(), or pass "
                                "suite.prepare(..., inputs=RequestInputs(ctc=...)) with ctc_draft()")
        eos = min(state.eos_token_ids) if state.eos_token_ids else None
        drafts = [list(row.tokens) + ([eos] if eos is not None else []) for row in ctc]
        gated = [self.max_entropy > 0 and float(row.frame_entropy.mean()) < self.max_entropy for row in ctc]
        state.rows = [CTCSpeculativeRow(d) for d in drafts]
        return Acceptance([d if g else [] for d, g in zip(drafts, gated)],
                          torch.zeros(state.batch, 0, dtype=torch.bool, device=state.cache.valid.device))

    def propose(self, state: DecodeState) -> Draft:
        guesses = []
        for b, row in enumerate(state.rows):
            if state.done[b] or row.rejected:
                guesses.append([])
                continue
            done_so_far = len(state.new_tokens(b))
            want = len(row.draft) - done_so_far
            n = room_for_guesses(state, b, min(want, self.max_guesses) if self.max_guesses > 0 else want)
            guesses.append(row.draft[done_so_far:done_so_far + n])
        return chain_draft(state, guesses)

    def accept(self, state: DecodeState, draft: Draft, logits) -> Acceptance:
        committed, accepted = [], []
        for b, verdict in enumerate(self._verdicts(state, draft, logits)):
            guess, row = draft.meta.guesses[b], state.rows[b]
            if verdict is None:
                committed.append([]), accepted.append(0)
                continue
            n, nxt = verdict.num_accepted, verdict.next_token
            if n < len(guess) and self.realign:
                full = row.draft
                pos = len(state.new_tokens(b)) + n      # index of the rejected hypothesis token
                rest = full[pos + 2:] if pos + 1 < len(full) and full[pos + 1] == nxt else full[pos + 1:]
                row.draft = state.new_tokens(b) + guess[:n] + [nxt] + rest
            elif n < len(guess) or not guess:       # (a capped draft fully accepted keeps drafting)
                row.rejected = True     # continue autoregressively from here
            committed.append(guess[:n] + [nxt])
            accepted.append(n)
        return chain_acceptance(draft, committed, accepted)

    def _verdicts(self, state: DecodeState, draft: Draft, logits) -> list[Verdict | None]:
        """Every row's drafts verified in one batched rule (None for done rows): the greedy prefix,
        the speculative rule on point masses, or (min_ratio < 1, greedy) the relaxed rule."""
        if self.min_ratio < 1.0 and state.params.greedy:
            return [None if state.done[b] else Verdict(*_relaxed_prefix(g, chain_logits(draft, logits, b), self.min_ratio))
                    for b, g in enumerate(draft.meta.guesses)]
        if state.params.greedy:
            return greedy_chain_verdicts(state, draft, logits)[0]
        return speculative_chain_verdicts(state, draft, chain_probs(state, draft, logits))


def ctc_greedy(log_probs: torch.Tensor, length: int, blank: int = 0) -> list[int]:
    """Best path of one row's (F, V) CTC log-probabilities: collapse repeats, drop blanks."""
    out, prev = [], blank
    for i in log_probs[:length].argmax(-1).tolist():
        if i != prev and i != blank:
            out.append(i)
        prev = i
    return out


def ctc_frame_entropy(log_probs: torch.Tensor, length: int) -> torch.Tensor:
    """(length,) entropy in nats of each frame's CTC distribution."""
    lp = log_probs[:length]
    return -(lp.exp() * lp).sum(-1)


def ctc_draft(log_probs: torch.Tensor, length: int, blank: int = 0) -> CTCHypothesis:
    """One row's CTC hypothesis (RequestInputs.ctc) from its (F, V) CTC log-probabilities."""
    return CTCHypothesis(ctc_greedy(log_probs, length, blank), ctc_frame_entropy(log_probs, length))


def _relaxed_prefix(guess: list[int], logits: torch.Tensor, min_ratio: float) -> tuple[int, int]:
    """Greedy relaxed acceptance: (accepted count, next token). logits (G+1, V)."""
    probs = torch.softmax(logits.float(), -1)
    for i, g in enumerate(guess):
        if probs[i, g] < min_ratio * probs[i].max():
            return i, int(probs[i].argmax())
    return len(guess), int(probs[len(guess)].argmax())
