"""SAM-Decoding (Hu et al. 2024, "SAM Decoding: Speculative Decoding via Suffix Automaton").

A suffix automaton (Blumer et al. 1985) of a token sequence S has one state per class of
substrings of S with the same end positions; feeding it a text token by token (a transition, or
suffix links back to a shorter suffix and then a transition) keeps the longest suffix of the text
that occurs in S, in O(1) amortised time per token. Each state records an end position of its
substrings in S, so the tokens after that position are the draft: "the longest suffix match".

Two automata, as in the paper:
  * the dynamic one, over the row's own text (prompt + output so far), extended with each
    committed token; the text is matched against the automaton of the text before the newest token,
    so the match is an earlier occurrence and has a continuation. Each state's end position is the
    latest occurrence fed (the paper drafts from the most recent one);
  * the static one, over a corpus (`corpus=`: a text file or a folder of text files, with the
    tokenizer that turns it into tokens; text.load() passes the embedded model's default corpus,
    text/weights/sam_corpus, and its tokenizer), built once per corpus and shared by every request.

SAM-Decoding "can be combined with other drafters" by match length; its best results pair it with
Token Recycling (suite/decoders/chain/token_recycling.py), `auxiliary="token_recycling"` here.
Where the paper picks one draft by match length, this file puts the candidates in one tree (the
dynamic and static continuations and Token Recycling's tree, merged where they agree), scores each
node by measured acceptance rates per drafter and match length, and lets suite/cost.py keep the
nodes that pay (a lone chain keeps the plain causal mask). Verification is lossless
(tree.py): greedy equals `ar`; sampling uses the multi-draft rule over point masses.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

from ...loop import Acceptance, DecodeState, Draft
from .base import room_for_guesses
from .suffix_automaton import SEPARATOR, StaticCorpus, SuffixAutomaton, corpus_automaton, read_corpus  # noqa: F401
from .token_recycling import RecyclingRow, TokenRecycling, read_scored, recycle
from .tree import DraftTree, NodeRates, bind_tree_costs, cut_trees, tree_draft, verify_trees
from ..base import DecoderBase
from ..options import option

@dataclass
class SamRow:
    dynamic: SuffixAutomaton               # over the row's text so far
    match: tuple[int, int] = (0, 0)        # (state, length): the text's longest earlier-occurring suffix
    static_match: tuple[int, int] = (0, 0)  # the same in the static corpus
    fed: int = 0                           # tokens of the row fed to both automata
    recycling: RecyclingRow | None = None  # the auxiliary Token Recycling's matrix
    rates: NodeRates | None = None         # conditional acceptance by (drafter and match length, depth, rank)


def _bucket(length: int) -> int:
    """Match lengths 1, 2, 3-4, 5-8, 9+ have their own acceptance rates."""
    return 0 if length <= 1 else 1 if length == 2 else 2 if length <= 4 else 3 if length <= 8 else 4


@dataclass(frozen=True)
class SAMDecoding(DecoderBase):
    corpus: Any = None        # a text file or folder (with tokenizer=), token-id lists, or None: the text only
    tokenizer: Any = None     # turns a text corpus into tokens (text.load() passes the model's)
    max_draft: int = 16       # tokens drafted from a match at most
    auxiliary: Any = "token_recycling"   # combined drafter (a TokenRecycling or its name); None: SAM alone
    max_nodes: int = 24       # tree nodes scored per step at most (the cost model keeps those that pay)
    max_corpus_tokens: int = option(500_000, 1, 1 << 30, operator=True)   # the operator's limit, not a request's
    trees: bool = True        # merge the drafts into a tree (bind turns it off without custom masks)
    cost: Any = "auto"        # the target's CostCurve ("auto": measured at bind; None: max_nodes always)
    chain_cost: Any = None    # the curve of plain causal forwards (bind fills it): a lone chain may pay more

    name: ClassVar[str] = "sam_decoding"
    requires: ClassVar[frozenset] = frozenset()

    @property
    def batch_independent(self) -> bool:
        """Rows share forwards when seeded (suite.scheduler) only with fixed sizes: a cost curve sizes
        every row's tree from the live rows' acceptance rates."""
        return self.cost is None

    def bind(self, model) -> "SAMDecoding":
        """Build the static automaton (once per corpus) and the auxiliary; without custom attention
        masks (chains only) the auxiliary's trees are left out."""
        from ...models.adapters import as_adapter
        trees = self.trees and as_adapter(model).capabilities.custom_mask
        bound = replace(self, corpus=corpus_automaton(self.corpus, self.tokenizer, self.max_corpus_tokens), trees=trees)
        bound = replace(bound, auxiliary=bound._auxiliary() if trees else None)
        return bind_tree_costs(bound, model)

    def _auxiliary(self) -> TokenRecycling | None:
        aux = self.auxiliary
        if aux is None or isinstance(aux, TokenRecycling):
            return aux
        if aux == "token_recycling":
            return TokenRecycling(corpus=self.corpus if isinstance(self.corpus, StaticCorpus) else None, cost=None)
        raise ValueError(f"sam_decoding's auxiliary= takes 'token_recycling', a TokenRecycling or None; got {aux!r}")

    def start(self, state: DecodeState) -> None:
        if self.max_draft < 0 or self.max_nodes < 0:
            raise ValueError("sam_decoding needs max_draft >= 0 and max_nodes >= 0")
        if isinstance(self.corpus, (str, Path)):
            raise ValueError("sam_decoding is not bound to a model: pass it through suite.generate / suite.prepare "
                             "(which build the corpus's automaton)")
        aux = self._auxiliary() if self.trees else None
        state.rows = []
        for b in range(state.batch):
            rates = NodeRates()     # one table for every drafter's nodes, the auxiliary's included
            recycling = RecyclingRow(aux.new_row(state.tokens[b]).adjacency, rates, aux.hot()) if aux else None
            state.rows.append(SamRow(SuffixAutomaton(), recycling=recycling, rates=rates))

    # -- matching ---------------------------------------------------------------------------------------

    def _feed(self, row: SamRow, tokens: list[int]) -> None:
        """Feed the row's new tokens to both automata (the dynamic one matched before it grows)."""
        dyn = row.dynamic
        static = self.corpus.automaton if isinstance(self.corpus, StaticCorpus) else None
        for i in range(row.fed, len(tokens)):
            x = tokens[i]
            if i > 0 and row.match[0] > 0:
                dyn.end[row.match[0]] = i - 1          # the latest occurrence of the matched suffix
            row.match = dyn.advance(row.match, x)
            dyn.extend(x)
            row.match = dyn.settle(row.match)
            if static is not None:
                row.static_match = static.advance(row.static_match, x)
        row.fed = len(tokens)

    def _chains(self, row: SamRow, room: int) -> list[tuple[tuple, list[int]]]:
        """(rate kind, continuation) of each automaton's match, longest match first."""
        n = min(self.max_draft, room)
        out = []
        (state, length), dyn = row.match, row.dynamic
        if state > 0 and n:
            out.append((length, ("dynamic", _bucket(length)), dyn.continuation(state, n)))
        if isinstance(self.corpus, StaticCorpus) and n:
            state, length = row.static_match
            if state > 0:
                out.append((length, ("static", _bucket(length)), self.corpus.automaton.continuation(state, n)))
        out.sort(key=lambda c: -c[0])
        return [(kind, chain) for _, kind, chain in out if chain]

    # -- propose / accept -------------------------------------------------------------------------------

    def propose(self, state: DecodeState) -> Draft:
        t0 = time.perf_counter()
        aux = self.auxiliary if isinstance(self.auxiliary, TokenRecycling) and self.trees else None
        trees = {}
        for b in range(state.batch):
            if state.done[b]:
                continue
            row = state.rows[b]
            self._feed(row, state.tokens[b])
            room = room_for_guesses(state, b, max(self.max_draft, aux.max_depth if aux else 0))
            if not room:
                continue
            chains = self._chains(row, room)
            if not self.trees:
                chains = chains[:1]
            tree = aux.grow(row.recycling, state.tokens[b][-1], room) if aux else DraftTree()
            for kind, chain in chains:
                parent, score = -1, 1.0
                for depth, token in enumerate(chain, 1):
                    score *= row.rates.rate(kind, depth, 0)
                    parent = tree.add(parent, token, score, 0, kind)
            trees[b] = tree
        draft = tree_draft(state, cut_trees(state, trees, self.cost, self.max_nodes, self.chain_cost))
        state.stats.draft_time_s += time.perf_counter() - t0
        return draft

    def accept(self, state: DecodeState, draft: Draft, logits) -> Acceptance:
        aux = self.auxiliary if isinstance(self.auxiliary, TokenRecycling) and self.trees else None
        if aux is not None:
            targets, top = read_scored(logits, aux.k, state.params.greedy)
        else:
            targets, top = (logits.argmax(-1).tolist() if state.params.greedy else None), None
        acc, paths = verify_trees(state, draft, logits, targets)
        for b in range(state.batch):
            tree = draft.meta[b]
            if state.done[b] or not tree.num_pending:
                continue
            row = state.rows[b]
            if aux is not None:
                recycle(row.recycling.adjacency, state.pending(b), tree, paths[b], top[b], draft.logits_from)
            row.rates.update(tree, paths[b], tree.sources)
        return acc

