"""SuffixDecoding (Oliaro et al., NeurIPS 2025, "SuffixDecoding: Extreme Speculative Decoding for
Emerging AI Applications", arXiv 2411.04975).

A model-free drafter for workloads that repeat themselves (agents calling tools, code edits,
multi-turn chat, batch jobs over similar documents). Two suffix trees (suite/decoders/chain/suffix_tree.py):
  * the per-request tree, over the request's prompt and its output so far;
  * the global tree, over the outputs of earlier requests (and the live ones, as they are generated),
    one per model, shared in-process by every request on it (`global_tree(model)`: the OpenAI server and
    the Text tab see the same one), bounded by `global_tokens` with the oldest requests evicted, and optionally
    kept on disk across processes (`global_file`: "auto", the model's file in the cache folder, or a path;
    loaded when the process first uses the tree, written as requests end, at most every SAVE_EVERY seconds,
    and at exit; the file holds at most `global_tokens` tokens, about 6 bytes each).
Each step, the longest suffix of the text that occurs in a tree is matched ("pattern matching"), and the
continuations seen after it become a speculation tree, grown best node first by frequency: a node's
estimate is the share of the matched occurrences that continue through it, nodes below
`min_token_prob` left out. The paper's adaptive speculation length: a match of p tokens drafts at most
MAX_SPEC = alpha * p tokens; per tree the candidate with the best score (the sum of the estimates,
the expected accepted length) over the match lengths wins.

Where the paper keeps the better of the two trees' candidates, here both go into one draft tree (merged
where they agree) and suite/cost.py keeps the nodes that pay for their width on this machine; each node's
score is its frequency estimate calibrated by measured acceptance (tree.NodeRates, by tree, match length,
depth and estimate). Matches as short as one token are drafted from (the index's shortest anchor): on a
fixed step every slot costs the same, and the calibration ranks such nodes low.

`auxiliary="token_recycling"` (the default; None: the paper's trees alone) adds Token Recycling's tree
(suite/decoders/chain/token_recycling.py: each token's top-k successors from the target's earlier logits) to
the draft tree, as sam_decoding pairs its automata with it. Why: on the agentic bench, in about half of the
decode steps the token that came next had never followed the current token in any text the trees held
(a replay of the bench's requests, 221 of 449 steps), so no suffix match can draft it; there the recycled
successors are the only guess (BENCHMARKS.md, "Text: agentic workloads").

Verification is lossless (tree.py): greedy equals `ar` token for token; sampling applies the multi-draft
rule to each node's children, every child a point mass (the trees hold only committed tokens and the
recycled successors come from earlier steps' logits, so a draft never depends on the step's uniforms).
"""
from __future__ import annotations

import atexit
import hashlib
import time
import weakref
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from ...loop import Acceptance, DecodeState, Draft
from .base import room_for_guesses
from .suffix_tree import Speculation, SuffixTree
from .token_recycling import RecyclingRow, TokenRecycling, read_scored, recycle
from .tree import DraftTree, NodeRates, bind_tree_costs, cut_trees, tree_draft, verify_trees
from ..base import DecoderBase
from ..options import option

# the calibration's rank: a node's conditional estimate (its count over its parent's) in bands, and the
# match length in buckets (2-3, 4-7, 8-15, 16+ tokens); their acceptance before any is measured
BANDS = (0.9, 0.6, 0.3, 0.0)
PRIOR = ((0.7, 0.8, 0.85, 0.9), (0.45, 0.5, 0.55, 0.6), (0.25, 0.3, 0.3, 0.35), (0.1, 0.1, 0.1, 0.1))

_GLOBAL: "weakref.WeakKeyDictionary[Any, SuffixTree]" = weakref.WeakKeyDictionary()   # model -> its global tree
_PINNED: dict[int, SuffixTree] = {}     # for models that cannot be weakly referenced (by id)


SAVE_EVERY = 30.0    # seconds between two writes of a global tree kept on disk (and once at exit)


def global_tree(model, max_tokens: int = 200_000, file: str | None = None) -> SuffixTree:
    """The model's global suffix tree (made on first use with the cap `max_tokens`, then shared by
    every request on the model, whichever adapter or front end runs it). file: where it is kept across
    processes ("auto": the model's own file in the cache folder, `global_file_path`; None: memory only),
    read when the tree is made."""
    from ...models.adapters import as_adapter
    adapter = as_adapter(model)
    key = getattr(adapter, "model", model)

    def make() -> SuffixTree:
        if not file:
            return SuffixTree(max_tokens)
        tree = SuffixTree.load(global_file_path(adapter) if file == "auto" else file, max_tokens)
        atexit.register(tree.save_now)
        return tree
    try:
        tree = _GLOBAL.get(key)
        if tree is None:
            tree = _GLOBAL[key] = make()
    except TypeError:
        tree = _PINNED.get(id(key))
        if tree is None:
            tree = _PINNED[id(key)] = make()
    return tree


def global_file_path(model) -> str:
    """The file of the model's global tree in the cache folder: one per model (its class and config, as its
    adapter declares them in `cost_identity`)."""
    from ...models.adapters import as_adapter
    from ...runtime.storage import cache_dir
    adapter = as_adapter(model)
    if not adapter.capabilities.cost_model:
        raise ValueError("global_file='auto' needs a model that declares its identity (capabilities.cost_model); "
                         "pass a file path instead")
    ident = adapter.cost_identity()[:2]          # the model's class and config, not its dtype or device
    return str(cache_dir("suffix", hashlib.sha256("\n".join(ident).encode()).hexdigest()[:16] + ".json"))


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
    recycling: RecyclingRow | None = None   # the auxiliary Token Recycling's matrix (auxiliary=)
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
    global_file: str | None = option(None, operator=True)   # keep the model's global tree on disk: "auto" (the
                                  # cache folder, per model) or a path; None: in memory only (the operator's)
    max_nodes: int = 32           # tree nodes scored per step at most (the cost model keeps those that pay)
    trees: bool = True            # draft trees (bind turns it off without custom masks: the better path)
    cost: Any = "auto"            # the target's CostCurve ("auto": measured at bind; None: max_nodes always)
    chain_cost: Any = None        # the curve of plain causal forwards (bind fills it)
    auxiliary: Any = "token_recycling"   # what drafts where the trees have nothing (a TokenRecycling or its
                                  # name; None: the paper's trees alone): its nodes join the draft tree

    name: ClassVar[str] = "suffix"
    requires: ClassVar[frozenset] = frozenset()
    forecasts: ClassVar[bool] = True            # auto asks what its draft promises, and it learns from every step

    def bind(self, model) -> "SuffixDecoding":
        """The model's global tree and cost curves; without custom attention masks, paths only."""
        from ...models.adapters import as_adapter
        shared = (global_tree(model, self.global_tokens, self.global_file) if self.global_tree == "model"
                  else self.global_tree)
        trees = self.trees and as_adapter(model).capabilities.custom_mask
        bound = replace(self, global_tree=shared, trees=trees)
        return bind_tree_costs(replace(bound, auxiliary=bound._auxiliary() if trees else None), model)

    def _auxiliary(self) -> TokenRecycling | None:
        aux = self.auxiliary
        if aux is None or isinstance(aux, TokenRecycling):
            return aux
        if aux == "token_recycling":
            return TokenRecycling(cost=None)
        raise ValueError(f"suffix's auxiliary= takes 'token_recycling', a TokenRecycling or None; got {aux!r}")

    def _aux(self) -> TokenRecycling | None:
        """The bound auxiliary (None without trees: its drafts are trees)."""
        return self._auxiliary() if self.trees else None

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
        aux = self._aux()
        state.rows = []
        for b in range(state.batch):
            own = SuffixTree(None, self.max_depth)
            row = SuffixRow(own, own.new_sequence(), shared.new_sequence() if shared is not None else 0,
                            rates=shared.rates if shared is not None else NodeRates(ranks=16, prior=_prior),
                            recycling=aux.new_row(state.tokens[b]) if aux is not None else None)
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

    def _tree(self, row: SuffixRow, candidates, tree: DraftTree | None = None) -> DraftTree:
        """The candidates in one draft tree (added to `tree`: the auxiliary's); a node's score is its parent's
        times its measured rate (by tree, depth, the band of its frequency estimate and its match's length)."""
        tree = DraftTree() if tree is None else tree
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
        trees, aux = {}, self._aux()
        for b in range(state.batch):
            if state.done[b]:
                continue
            text = state.tokens[b]
            self._feed(state, b, text)
            row = state.rows[b]
            room = room_for_guesses(state, b, self.max_spec)
            if room:
                base = aux.grow(row.recycling, text[-1], room) if aux is not None and row.recycling else None
                trees[b] = self._tree(row, self._candidates(row, text, room), base)
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
        aux = self._aux()
        targets, top = read_scored(logits, aux.k, state.params.greedy) if aux is not None else (None, None)
        acc, paths = verify_trees(state, draft, logits, targets)
        shared = self.global_tree
        for b in range(state.batch):
            tree = draft.meta[b]
            if state.done[b] or not tree.num_pending:
                continue
            row = state.rows[b]
            row.rates.update(tree, paths[b], tree.sources)
            if row.recycling is not None:
                recycle(row.recycling.adjacency, state.pending(b), tree, paths[b], top[b], draft.logits_from)
                row.recycling.rates.update(tree, paths[b], tree.sources)
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
            if self.global_tree is not None:
                self.global_tree.save_now(SAVE_EVERY)      # kept on disk (global_file): at most every SAVE_EVERY s
