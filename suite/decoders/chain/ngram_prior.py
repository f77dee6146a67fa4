"""Input-guided n-gram drafting from a known prior text (prompt lookup over a reference).

Papers: prompt lookup decoding (Saxena 2023) and ANPD (Ou et al., NAACL 2024), with the lookup
table built from a reference the caller supplies instead of the prompt: re-reading a document
whose previous version is known (OCR of a revised page, re-transcription). The draft is the
continuation, in the prior text, of the longest n-gram that ends the committed text; drafts are
point masses verified by the speculative rule, so the output equals `ar` exactly (greedy) or in
distribution (sampling).

The prior comes as `RequestInputs(prior_tokens=...)`: one token list per row (document.ocr fills
it from `prior_texts=`), laid out like the row (its prompt, then the previous output). Rows with an
empty prior, or a request without priors, decode as `ar`. With `aligned` (the default), a step
whose n-gram finds nothing drafts the prior from the row's own position instead: after a
substituted token (a changed digit, a moved box coordinate) the rest of the prior stays aligned.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ...loop import Acceptance, DecodeState, Draft
from .base import accept_point_masses, chain_draft, room_for_guesses
from ..base import DecoderBase


def prior_index(prior: list[int], sizes: range) -> dict[tuple, int]:
    """n-gram of the prior -> index just after its first occurrence (where its continuation starts)."""
    index: dict[tuple, int] = {}
    for end in range(len(prior)):
        for n in sizes:
            if end + 1 >= n:
                index.setdefault(tuple(prior[end + 1 - n:end + 1]), end + 1)
    return index


@dataclass
class NgramPriorRow:
    prior: list[int]                 # the row's prior text (empty: it decodes as `ar`)
    index: dict[tuple, int]          # `prior_index` of it: n-gram -> where its continuation starts


@dataclass(frozen=True)
class NgramPrior(DecoderBase):
    max_ngram: int = 3
    min_ngram: int = 1
    num_draft: int = 16
    aligned: bool = True          # no n-gram match: draft the prior at the row's own position

    name: ClassVar[str] = "ngram_prior"
    requires: ClassVar[frozenset] = frozenset()
    batch_independent: ClassVar[bool] = True    # rows draw from their own streams, size from their own state

    def start(self, state: DecodeState) -> None:
        if not 1 <= self.min_ngram <= self.max_ngram:
            raise ValueError(f"need 1 <= min_ngram <= max_ngram, got {self.min_ngram}, {self.max_ngram}")
        priors = [[] for _ in range(state.batch)] if state.inputs.prior_tokens is None else \
            state.inputs.rows("prior_tokens", state.batch, self.name, "one token list per row")
        sizes = range(self.max_ngram, self.min_ngram - 1, -1)
        state.rows = [NgramPriorRow(list(p), prior_index(list(p), sizes)) for p in priors]

    def lookup(self, tokens: list[int], prior: list[int], index: dict, length: int) -> list[int]:
        for n in range(self.max_ngram, self.min_ngram - 1, -1):
            if len(tokens) >= n:
                start = index.get(tuple(tokens[-n:]))
                if start is not None and start < len(prior):
                    return prior[start:start + length]
        return prior[len(tokens):len(tokens) + length] if self.aligned else []

    def propose(self, state: DecodeState) -> Draft:
        guesses = []
        for b, row in enumerate(state.rows):
            n = room_for_guesses(state, b, self.num_draft)
            guesses.append(self.lookup(state.tokens[b], row.prior, row.index, n) if n and not state.done[b] else [])
        return chain_draft(state, guesses)

    def accept(self, state: DecodeState, draft: Draft, logits) -> Acceptance:
        return accept_point_masses(state, draft, logits)[0]
