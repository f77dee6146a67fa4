"""SuffixDecoding (Oliaro et al., NeurIPS 2025, "SuffixDecoding: Extreme Speculative Decoding for
Emerging AI Applications", arXiv 2411.04975).

A model-free drafter for workloads that repeat themselves (agents calling tools, code edits,
multi-turn chat, batch jobs over similar documents). Two suffix trees (suite/decoders/chain/suffix_tree.py):
  * the per-request tree, over the request's prompt and its output so far;
  * the global tree, over the outputs of earlier requests (and the live ones, as they are generated),
    one per model, shared in-process by every request on it (`global_tree(model)`: the OpenAI server and
    the Text tab see the same one), bounded by `global_tokens` with the oldest requests evicted.
Each step, the longest suffix of the text that occurs in a tree is matched ("pattern matching"), and the
continuations seen after it become a speculation tree, grown best node first by frequency: a node's
estimate is the share of the matched occurrences that continue through it, nodes below
`min_token_prob` left out. The paper's adaptive speculation length: a match of p tokens drafts at most
MAX_SPEC = alpha * p tokens; per tree the candidate with the best score (the sum of the estimates,
the expected accepted length) over the match lengths wins.

Where the paper keeps the better of the two trees' candidates, here both go into one draft tree (merged
where they agree) and suite/cost.py keeps the nodes that pay for their width on this machine; each node's
score is its frequency estimate calibrated by measured acceptance (tree.NodeRates, by tree, match length,
depth and estimate). Verification is lossless (tree.py): greedy equals `ar` token for token; sampling
applies the multi-draft rule to each node's children, every child a point mass (the trees hold only
committed tokens, so a draft never depends on the step's uniforms).
"""
from __future__ import annotations

import time
import weakref
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from ...loop import Acceptance, DecodeState, Draft
from .base import room_for_guesses
from .suffix_tree import Speculation, SuffixTree
from .tree import DraftTree, NodeRates, bind_tree_costs, cut_trees, tree_draft, verify_trees
from ..base import DecoderBase
from ..options import option

# the calibration's rank: a node's conditional estimate (its count over its parent's) in bands, and the
# match length in buckets (2-3, 4-7, 8-15, 16+ tokens); their acceptance before any is measured
BANDS = (0.9, 0.6, 0.3, 0.0)
PRIOR = ((0.7, 0.8, 0.85, 0.9), (0.45, 0.5, 0.55, 0.6), (0.25, 0.3, 0.3, 0.35), (0.1, 0.1, 0.1, 0.1))

_GLOBAL: "weakref.WeakKeyDictionary[Any, SuffixTree]" = weakref.WeakKeyDictionary()   # model -> its global tree
_PINNED: dict[int, SuffixTree] = {}     # for models that cannot be weakly referenced (by id)


def global_tree(model, max_tokens: int = 200_000) -> SuffixTree:
    """The model's global suffix tree (made on first use with the cap `max_tokens`, then shared by
    every request on the model, whichever adapter or front end runs it)."""
    from ...models.adapters import as_adapter
    key = getattr(as_adapter(model), "model", model)
    try:
        tree = _GLOBAL.get(key)
        if tree is None:
            tree = _GLOBAL[key] = SuffixTree(max_tokens)
    except TypeError:
        tree = _PINNED.setdefault(id(key), SuffixTree(max_tokens))
    return tree


def global_tree_stats(model) -> dict:
    """The model's global tree: its size (stored tokens, sequences, index entries, the cap, evictions)
    and hit rate (lookups that found a match; drafted and accepted tokens). For /v1/stats."""
    return global_tree(model).stats()


def _rank(ratio: float, length: int) -> int:
    """A node's calibration rank: the band of its estimate and the bucket of its match's length."""
    band = next(i for i, edge in enumerate(BANDS) if ratio >= edge)
    return 4 * band + (0 if length < 4 else 1 if length < 8 else 2 if length < 16 else 3)


def _prior(rank: int) -> float:
    return PRIOR[rank // 4][rank % 4]


@dataclass
class SuffixRow:
    own: SuffixTree            # the request's tree: prompt + output
    seq: int = 0               # this row's sequence in the own tree
    shared_seq: int = 0        # this row's output in the global tree (0: none)
    fed: int = 0               # tokens of the row already in the trees
    rates: NodeRates | None = None
    plan: Any = None           # (the batch's state key, its cut trees): this step's drafts, made once for
                               # auto's forecast and the propose that follows it


@dataclass(frozen=True)
class SuffixDecoding(DecoderBase):
    alpha: float = 4.0            # MAX_SPEC = alpha * match length (the paper's adaptive speculation length)
    max_spec: int = 32            # tokens speculated at most
    min_token_prob: float = 0.1   # nodes whose estimated chance is below this are not drafted
    max_depth: int = 64           # longest match considered
    global_tree: Any = "model"    # "model": the model's shared tree; a SuffixTree; None: the request's own only
    global_tokens: int = option(200_000, 1, 1 << 26, operator=True)   # the model's global tree's cap in tokens
                                  # (when this request makes it): the operator's, not a request's
    max_nodes: int = 32           # tree nodes scored per step at most (the cost model keeps those that pay)
    trees: bool = True            # draft trees (bind turns it off without custom masks: the better path)
    cost: Any = "auto"            # the target's CostCurve ("auto": measured at bind; None: max_nodes always)
    chain_cost: Any = None        # the curve of plain causal forwards (bind fills it)

    name: ClassVar[str] = "suffix"
    requires: ClassVar[frozenset] = frozenset()
    forecasts: ClassVar[bool] = True            # auto asks what its draft promises, and it learns from every step

    def bind(self, model) -> "SuffixDecoding":
        """The model's global tree and cost curves; without custom attention masks, paths only."""
        from ...models.adapters import as_adapter
        shared = global_tree(model, self.global_tokens) if self.global_tree == "model" else self.global_tree
        trees = self.trees and as_adapter(model).capabilities.custom_mask
        return bind_tree_costs(replace(self, global_tree=shared, trees=trees), model)

    def _shared(self) -> SuffixTree | None:
        if self.global_tree is None or isinstance(self.global_tree, SuffixTree):
            return self.global_tree
        raise ValueError("suffix is not bound to a model: pass it through suite.generate / suite.prepare "
                         "(global_tree= takes 'model', a SuffixTree or None)")

    def start(self, state: DecodeState) -> None:
        if self.alpha <= 0 or self.max_spec < 0 or self.max_nodes < 0 or self.max_depth < 2:
            raise ValueError("suffix needs alpha > 0, max_spec >= 0, max_nodes >= 0, max_depth >= 2")
        shared = self._shared()
        if shared is not None and shared.rates is None:     # what drafts from these trees came to, per model:
            shared.rates = NodeRates(ranks=16, prior=_prior)  # a new request starts from the earlier ones' rates
        state.rows = []
        for _ in range(state.batch):
            own = SuffixTree(None, self.max_depth)
            row = SuffixRow(own, own.new_sequence(), shared.new_sequence() if shared is not None else 0,
                            rates=shared.rates if shared is not None else NodeRates(ranks=16, prior=_prior))
            state.rows.append(row)

    # -- the trees ------------------------------------------------------------------------------------

    def _feed(self, state: DecodeState, b: int, tokens: list[int]) -> None:
        """Row b's text grew to `tokens`: the new tokens into its own tree, the output's into the global one."""
        row, shared, prompt = state.rows[b], self.global_tree, state.prompt_lengths[b]
        new = tokens[row.fed:]
        row.own.add(row.seq, new)
        if shared is not None and row.shared_seq:
            shared.add(row.shared_seq, tokens[max(row.fed, prompt):])
        row.fed = len(tokens)

    def _candidates(self, row: SuffixRow, text: list[int], room: int) -> list[tuple[str, Speculation]]:
        n = min(self.max_spec, room)
        out = []
        for source, tree in (("request", row.own), ("global", self.global_tree)):
            if tree is not None:
                spec = tree.speculate(text, self.alpha, n, self.min_token_prob, self.trees)
                if spec is not None:
                    out.append((source, spec))
        if not self.trees:                     # one path: the paper's choice, the better score
            out = sorted(out, key=lambda c: -c[1].score)[:1]
        return out

    def _tree(self, row: SuffixRow, candidates) -> DraftTree:
        """The candidates in one draft tree; a node's score is its parent's times its measured rate
        (by tree, depth, the band of its frequency estimate and its match's length)."""
        tree = DraftTree()
        for source, spec in candidates:
            placed, depth = [], []
            for token, parent, prob in zip(spec.tokens, spec.parents, spec.probs):
                ratio = prob / (spec.probs[parent] if parent >= 0 else 1.0)
                d = 1 if parent < 0 else depth[parent] + 1
                rank = _rank(ratio, spec.match_length)
                score = (1.0 if parent < 0 else tree.scores[placed[parent]]) * row.rates.rate(source, d, rank)
                placed.append(tree.add(-1 if parent < 0 else placed[parent], token, score, rank, source))
                depth.append(d)
        return tree

    # -- propose / accept -----------------------------------------------------------------------------

    def _plan(self, state: DecodeState) -> dict[int, DraftTree]:
        """This step's cut trees per live row (made once per step: a forecast and the propose after it share
        them)."""
        key = tuple((b, len(state.tokens[b]), state.num_cached[b]) for b in range(state.batch) if not state.done[b])
        live = [state.rows[b] for b in range(state.batch) if not state.done[b]]
        plan = live[0].plan if live else None
        if plan is not None and plan[0] == key and all(row.plan is plan for row in live):
            return plan[1]
        t0 = time.perf_counter()
        trees = {}
        for b in range(state.batch):
            if state.done[b]:
                continue
            text = state.tokens[b]
            self._feed(state, b, text)
            room = room_for_guesses(state, b, self.max_spec)
            if room:
                trees[b] = self._tree(state.rows[b], self._candidates(state.rows[b], text, room))
        cut = cut_trees(state, trees, self.cost, self.max_nodes, self.chain_cost)
        plan = (key, cut)
        for row in live:
            row.plan = plan
        state.stats.draft_time_s += time.perf_counter() - t0
        return cut

    def forecast(self, state: DecodeState) -> tuple[float, float, bool]:
        """What this step's draft promises before it runs (for auto): the tokens a live row is expected to
        commit (1 + the cut tree's scores, its expected accepted length), the widest row's tokens and
        whether a row drafts a tree (a masked forward) rather than a chain."""
        cut, rows = self._plan(state), [b for b in range(state.batch) if not state.done[b]]
        if not rows:
            return 1.0, 1.0, False
        committed = sum(1.0 + sum(cut[b].scores) if b in cut else 1.0 for b in rows) / len(rows)
        width = max(len(state.pending(b)) + (len(cut[b].tokens) if b in cut else 0) for b in rows)
        return committed, float(width), any(not cut[b].is_chain for b in rows if b in cut)

    def propose(self, state: DecodeState) -> Draft:
        cut = self._plan(state)
        for b in range(state.batch):
            if not state.done[b]:
                state.rows[b].plan = None          # used: the next step plans again
        return tree_draft(state, cut)

    def follow(self, state: DecodeState, committed: list[list[int]]) -> None:
        """Another decoder ran this step (auto): a row that ends with it gives its last tokens to the trees
        (the others are fed at the next plan), so the global tree learns every request's whole output; and
        where this step's plan was made (auto's forecast), its nodes are scored against the tokens the step
        committed (the target's own, as far as they go), so its rates, and its forecasts, keep learning."""
        for b in range(state.batch):
            if state.done[b]:
                continue
            row = state.rows[b]
            plan, row.plan = row.plan, None
            if plan is not None and state.params.greedy:
                self._shadow(row, plan[1].get(b), committed[b])
            self._last(state, b, committed[b])

    @staticmethod
    def _shadow(row: SuffixRow, tree: DraftTree | None, committed: list[int]) -> None:
        """The plan's nodes no deeper than the committed tokens reach, its path the one they spell."""
        if tree is None or not tree.tokens or not committed:
            return
        depth = tree.depth()
        keep = [i for i, d in enumerate(depth) if d <= len(committed)]
        path, node = [], -1
        kids = tree.children()
        for token in committed:
            node = next((i for i in kids.get(node, ()) if tree.tokens[i] == token), None)
            if node is None or depth[node] > len(committed):
                break
            path.append(node)
        sub_index = {old: new for new, old in enumerate(keep)}
        sub = DraftTree(tokens=[tree.tokens[i] for i in keep],
                        parents=[-1 if tree.parents[i] < 0 else sub_index[tree.parents[i]] for i in keep],
                        scores=[tree.scores[i] for i in keep], ranks=[tree.ranks[i] for i in keep],
                        sources=[tree.sources[i] for i in keep])
        row.rates.update(sub, [sub_index[i] for i in path], sub.sources)

    def accept(self, state: DecodeState, draft: Draft, logits) -> Acceptance:
        acc, paths = verify_trees(state, draft, logits)
        shared = self.global_tree
        for b in range(state.batch):
            tree = draft.meta[b]
            if state.done[b] or not tree.num_pending:
                continue
            row = state.rows[b]
            row.rates.update(tree, paths[b], tree.sources)
            if shared is not None:
                shared.drafted += sum(s == "global" for s in tree.sources)
                shared.accepted += sum(tree.sources[i] == "global" for i in paths[b])
            self._last(state, b, acc.committed[b])
        return acc

    def _last(self, state: DecodeState, b: int, committed: list[int]) -> None:
        """A row this step ends: its last tokens into the trees now (no later propose feeds them)."""
        new = committed[:state.room(b)]
        end = next((i for i, t in enumerate(new) if t in state.eos_token_ids), None)
        if end is not None or len(new) >= state.room(b):
            self._feed(state, b, state.tokens[b] + new[:None if end is None else end + 1])
