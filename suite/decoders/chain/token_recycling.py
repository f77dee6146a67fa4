"""Token Recycling (Luo et al. 2024, "Turning Trash into Treasure: Accelerating Inference of Large
Language Models with Token Recycling").

Every forward already computes, at every slot it scores, the target's distribution over the next
token; decoding keeps one token of it and throws the rest away. Token Recycling keeps the top-k
candidates instead, in an adjacency matrix M (vocab x k): after each forward, for every scored
slot holding token x, M[x] <- the top-k tokens of that slot's logits ("new candidates update the
matrix"). The next draft is a tree grown from M by a breadth-first-like search from the newest
token x_t: its children are M[x_t], theirs M[child], and so on; the tree is verified in ONE
forward with tree attention (each node sees the context and its ancestors), and the longest
accepted path is committed.

Here:
  * M is kept per row and sparse (a dict token -> its k candidates, the rows of the matrix that were
    ever written), seeded from the prompt's own successions (x_i -> x_{i+1}, most recent first) so
    the first steps have candidates; every scored slot then overwrites its token's row, the
    accepted path last (its contexts are the text's). The paper keeps M from query to query (a hot
    start); here a request's M starts from the prompt and, for rows never written, from a corpus's
    most frequent successions (`corpus=`; text.load() passes the model's own earlier outputs,
    text/weights/sam_corpus), so no request depends on the ones before it;
  * the tree's shape is not a static template: each node's chance of being accepted is the product
    of conditional acceptance rates along its path, measured per (depth, rank in M's row), and the
    tree grows best node first (suite/decoders/chain/tree.py); suite/cost.py keeps as many nodes
    as pay for their width on this machine (none: a plain step);
  * verification (tree.py) is lossless: greedy equals `ar` token for token; sampling applies the
    multi-draft rule to each node's children, each a point mass (M is a function of the history).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any, ClassVar

import torch

from ...loop import Acceptance, DecodeState, Draft
from .base import room_for_guesses
from .suffix_automaton import corpus_automaton
from .tree import DraftTree, NodeRates, best_first, bind_tree_costs, cut_trees, tree_draft, verify_trees
from ..base import DecoderBase

KIND = "tr"    # the rate table of Token Recycling's nodes


@dataclass
class RecyclingRow:
    adjacency: dict[int, list[int]]    # M: token -> its k candidate successors, most likely first
    rates: NodeRates                   # conditional acceptance by (kind, depth, rank)
    hot: dict[int, list[int]] | None = None   # M's hot start (shared, read only): rows M never wrote


def seed_adjacency(tokens: list[int], k: int) -> dict[int, list[int]]:
    """M seeded from a text's successions: x_i -> x_{i+1}, the most recent first."""
    adj: dict[int, list[int]] = {}
    for a, b in zip(tokens, tokens[1:]):
        row = adj.setdefault(a, [])
        if b in row:
            row.remove(b)
        row.insert(0, b)
        del row[k:]
    return adj


def read_scored(logits: torch.Tensor, k: int, greedy: bool) -> tuple[list | None, list]:
    """(the argmax of every scored slot when greedy, else None; its top-k tokens) per row, in one
    host transfer. logits (B, N, V)."""
    top = logits.topk(min(k, logits.shape[-1]), -1).indices                     # (B, N, k)
    if not greedy:
        return None, top.tolist()
    both = torch.cat([logits.argmax(-1, keepdim=True), top], -1).tolist()      # (B, N, 1 + k)
    return [[s[0] for s in row] for row in both], [[s[1:] for s in row] for row in both]


@dataclass(frozen=True)
class TokenRecycling(DecoderBase):
    k: int = 8               # candidates kept per token (the matrix's width; the paper's k = 8)
    max_depth: int = 6       # deepest draft node
    max_nodes: int = 24      # tree nodes grown per step (the cost model keeps those that pay)
    corpus: Any = None       # hot start: a text file or folder (with tokenizer=) or token-id lists whose
                             # successions fill M's unwritten rows (text.load() passes sam_decoding's corpus)
    tokenizer: Any = None
    cost: Any = "auto"       # the target's CostCurve ("auto": measured at bind; None: always max_nodes)
    chain_cost: Any = None   # the curve of plain causal forwards (bind fills it): a lone chain may pay more

    name: ClassVar[str] = "token_recycling"
    requires: ClassVar[frozenset] = frozenset({"custom_mask"})

    @property
    def batch_independent(self) -> bool:
        """Rows share forwards when seeded (suite.scheduler) only with fixed sizes: a cost curve sizes
        every row's tree from the live rows' acceptance rates."""
        return self.cost is None

    def bind(self, model) -> "TokenRecycling":
        return bind_tree_costs(replace(self, corpus=corpus_automaton(self.corpus, self.tokenizer)), model)

    def hot(self) -> dict[int, list[int]] | None:
        """M's hot start: each token's k most frequent successors in the corpus (None without one)."""
        if self.corpus is None:
            return None
        if not hasattr(self.corpus, "successors"):
            raise ValueError("token_recycling is not bound to a model: pass it through suite.generate / "
                             "suite.prepare (which read its corpus)")
        return self.corpus.successors(self.k)

    def start(self, state: DecodeState) -> None:
        self.check()
        state.rows = [self.new_row(state.tokens[b]) for b in range(state.batch)]

    def check(self) -> None:
        if self.k < 1 or self.max_depth < 1 or self.max_nodes < 0:
            raise ValueError("token_recycling needs k >= 1, max_depth >= 1, max_nodes >= 0")

    def new_row(self, tokens: list[int]) -> RecyclingRow:
        return RecyclingRow(seed_adjacency(tokens, self.k), NodeRates(), self.hot())

    # -- the draft tree -----------------------------------------------------------------------------

    def grow(self, row: RecyclingRow, root: int, room: int) -> DraftTree:
        """The best `max_nodes` nodes reachable from `root` through M, at most `room` deep."""
        adj, rates, hot = row.adjacency, row.rates, row.hot or {}

        def children(token: int, depth: int):
            return [(c, rates.rate(KIND, depth, r)) for r, c in enumerate(adj.get(token) or hot.get(token, ()))]
        return best_first(root, children, self.max_nodes, min(room, self.max_depth), KIND)

    def propose(self, state: DecodeState) -> Draft:
        t0 = time.perf_counter()
        trees = {}
        for b in range(state.batch):
            room = room_for_guesses(state, b, self.max_depth)
            if not state.done[b] and room:
                trees[b] = self.grow(state.rows[b], state.tokens[b][-1], room)
        draft = tree_draft(state, cut_trees(state, trees, self.cost, self.max_nodes, self.chain_cost))
        state.stats.draft_time_s += time.perf_counter() - t0
        return draft

    # -- verification and recycling -----------------------------------------------------------------

    def accept(self, state: DecodeState, draft: Draft, logits) -> Acceptance:
        targets, top = read_scored(logits, self.k, state.params.greedy)
        acc, paths = verify_trees(state, draft, logits, targets)
        for b in range(state.batch):
            if not state.done[b] and draft.meta[b].num_pending:
                row, tree = state.rows[b], draft.meta[b]
                recycle(row.adjacency, state.pending(b), tree, paths[b], top[b], draft.logits_from)
                row.rates.update(tree, paths[b], tree.sources)
        return acc


def recycle(adjacency: dict[int, list[int]], pending: list[int], tree: DraftTree, path: list[int],
            top: list[list[int]], offset: int) -> None:
    """M[x] <- the top-k of the slot holding x, for every scored slot of the row: the nodes off the
    accepted path first, then the pending tokens, then the accepted path (whose contexts are the
    text's, so they have the last word)."""
    p = len(pending)
    on_path = set(path)
    for i, token in enumerate(tree.tokens):
        if i not in on_path:
            adjacency[token] = top[p + i - offset]
    for j in range(max(offset, 0), p):
        adjacency[pending[j]] = top[j - offset]
    for i in path:
        adjacency[tree.tokens[i]] = top[p + i - offset]
