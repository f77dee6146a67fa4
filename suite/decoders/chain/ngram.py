"""N-gram drafting: prompt lookup (Saxena 2023) with an adaptive multi-level n-gram table
(ANPD, Ou et al. NAACL 2024).

The table maps every n-gram (n = max_ngram .. min_ngram) of the prompt and of the generated text
to where it last occurred; it grows online as tokens are committed. The draft is the continuation
of the longest n-gram that ends the text. Drafts are point masses verified by the speculative rule
(greedy: longest matching prefix), so the output equals `ar`'s exactly (greedy) or in
distribution (sampling).

Drafts are not free on a CPU (a forward over 10 tokens costs about 1.8 single-token forwards),
so the draft length follows the evidence: a longer matched n-gram earns a longer draft
(num_draft * n / max_ngram), and a fully accepted draft doubles the next one (up to
2 * num_draft) while a rejection resets it (`adaptive`). Matches shorter than min_ngram = 2 are
too unreliable to pay for themselves.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from ...cost import bind_cost, chain_sizes, record
from ...loop import Acceptance, DecodeState, Draft
from .base import ChainRow, accept_point_masses, chain_draft, room_for_guesses
from ..base import DecoderBase


class NgramTable:
    """Most recent continuation index of every n-gram of a growing token list."""

    def __init__(self, max_n: int, min_n: int):
        self.sizes = range(max_n, min_n - 1, -1)
        self.index: dict[tuple, int] = {}
        self.indexed = 0   # n-grams ending before this many tokens are indexed

    def update(self, tokens: list[int]) -> None:
        # index n-grams that end at j for j < len-1, so each has a continuation
        for end in range(self.indexed, len(tokens) - 1):
            for n in self.sizes:
                if end + 1 >= n:
                    self.index[tuple(tokens[end + 1 - n:end + 1])] = end + 1
        self.indexed = max(self.indexed, len(tokens) - 1)

    def lookup(self, tokens: list[int]) -> tuple[int, int]:
        """(start of the continuation, n) of the longest n-gram ending `tokens`; (0, 0) if none."""
        for n in self.sizes:
            if len(tokens) >= n:
                start = self.index.get(tuple(tokens[-n:]))
                if start is not None:
                    return start, n
        return 0, 0


@dataclass
class NgramRow(ChainRow):
    table: NgramTable | None = None
    streak: int = 1              # draft length multiplier (`adaptive`)


@dataclass(frozen=True)
class Ngram(DecoderBase):
    max_ngram: int = 4
    min_ngram: int = 2
    num_draft: int = 10     # draft length for a max_ngram match
    adaptive: bool = True   # double the draft after a full acceptance, reset after a rejection
    cost: Any = "auto"      # the target's cost curve: drafts cut to what pays (suite.cost); None: as above

    name: ClassVar[str] = "ngram"
    requires: ClassVar[frozenset] = frozenset()

    @property
    def batch_independent(self) -> bool:
        """Rows share forwards when seeded (suite.scheduler) only with fixed sizes: a cost curve sizes
        every row's drafts from the live rows' acceptance rates."""
        return self.cost is None

    def bind(self, model) -> "Ngram":
        return bind_cost(self, model)

    def start(self, state: DecodeState) -> None:
        if not 1 <= self.min_ngram <= self.max_ngram:
            raise ValueError(f"need 1 <= min_ngram <= max_ngram, got {self.min_ngram}, {self.max_ngram}")
        state.rows = [NgramRow(table=NgramTable(self.max_ngram, self.min_ngram)) for _ in range(state.batch)]

    def propose(self, state: DecodeState) -> Draft:
        guesses = []
        for b, row in enumerate(state.rows):
            row.table.update(state.tokens[b])
            start, n = row.table.lookup(state.tokens[b])
            want = round(self.num_draft * n / self.max_ngram) * row.streak
            length = room_for_guesses(state, b, min(want, 2 * self.num_draft))
            guesses.append(state.tokens[b][start:start + length] if n else [])
        sizes = chain_sizes(state, self.cost, [len(g) for g in guesses])
        return chain_draft(state, [g[:k] for g, k in zip(guesses, sizes)])

    def accept(self, state: DecodeState, draft: Draft, logits) -> Acceptance:
        acceptance, verdicts = accept_point_masses(state, draft, logits)
        record(state, [len(g) for g in draft.meta.guesses], [0 if v is None else v.num_accepted for v in verdicts])
        for b, v in enumerate(verdicts):
            guess = draft.meta.guesses[b]
            if self.adaptive and v is not None and guess:
                state.rows[b].streak = 2 if v.num_accepted == len(guess) else 1
        return acceptance
