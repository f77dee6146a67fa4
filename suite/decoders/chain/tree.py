"""Helpers for decoders whose draft is a token tree of point masses (Token Recycling, SAM-Decoding):
the tree's layout in one forward (tree attention: each node sees the cached context, the row's
pending tokens, its ancestors and itself), node scores and the cost model's cut, and the walk that
verifies it.

A node's score is the draft's estimate of the chance it lies on the accepted path (the product of
conditional acceptance rates along its path), so a tree's expected accepted length is the sum of
its nodes' scores; `cut_trees` keeps each row's best nodes, as many as `suite.cost.best_size` pays
for. Verification is lossless: greedy follows the target's argmax (the output equals `ar`'s);
sampling applies the multi-draft rule to each node's children, every child a point mass (the
candidates are functions of the history only, drawn before this step's uniforms).
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field, replace

import torch

from kernels.reference import tree_mask

from ...acceptance import accept_multi_draft
from ...cost import best_size, bind_cost
from ...loop import Acceptance, DecodeState, Draft
from ...random_streams import ACCEPT
from ...sampling import logits_to_probs


@dataclass
class DraftTree:
    """One row's draft: node i holds tokens[i], parents[i] (-1: the root, the newest committed
    token) and sits at draft slot num_pending + i; parents come before their children."""
    tokens: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)   # each node's chance of acceptance (estimate)
    ranks: list[int] = field(default_factory=list)      # each node's rank among its parent's candidates
    sources: list[str] = field(default_factory=list)    # which drafter proposed it
    num_pending: int = 0

    def depth(self) -> list[int]:
        out = []
        for par in self.parents:
            out.append(1 if par < 0 else out[par] + 1)
        return out

    @property
    def is_chain(self) -> bool:
        return all(par == i - 1 for i, par in enumerate(self.parents))

    def children(self) -> dict[int, list[int]]:
        kids: dict[int, list[int]] = {}
        for i, par in enumerate(self.parents):
            kids.setdefault(par, []).append(i)
        return kids

    def add(self, parent: int, token: int, score: float, rank: int, source: str) -> int:
        """The child `token` of `parent` (an existing child keeps the better score); its index."""
        for i, (par, tok) in enumerate(zip(self.parents, self.tokens)):
            if par == parent and tok == token:
                if score > self.scores[i]:
                    self.scores[i], self.sources[i] = score, source
                return i
        self.tokens.append(token), self.parents.append(parent), self.scores.append(score)
        self.ranks.append(rank), self.sources.append(source)
        return len(self.tokens) - 1


def best_first(root: int, children, max_nodes: int, max_depth: int, source: str = "") -> DraftTree:
    """Grow a tree from the token `root` best node first: children(token, depth) -> [(token, rate)],
    the candidates after `token` for a node at `depth` (1: the root's children) in rank order, each
    with its conditional acceptance rate; a node's score is its parent's times its rate. At most
    max_nodes nodes, none deeper than max_depth."""
    tree, heap, tie = DraftTree(), [], 0

    def push(parent: int, token: int, score: float, depth: int) -> None:
        nonlocal tie
        if depth >= max_depth:
            return
        for rank, (child, rate) in enumerate(children(token, depth + 1)):
            if rate > 0:
                heapq.heappush(heap, (-score * rate, tie, parent, child, rank, depth + 1))
                tie += 1

    push(-1, root, 1.0, 0)
    while heap and len(tree.tokens) < max_nodes:
        neg, _, parent, token, rank, depth = heapq.heappop(heap)
        push(tree.add(parent, token, -neg, rank, source), token, -neg, depth)
    return tree


def cut_trees(state: DecodeState, trees: dict[int, DraftTree], curve, max_nodes: int,
              chain_curve=None) -> dict[int, DraftTree]:
    """Each row's best nodes by score (ancestor-closed: a child never outscores its parent; ties go
    to the shallower), as many as the cost curve pays for across the batch (`best_size`: every row
    takes the same count); curve None: max_nodes. With chain_curve (the cost of plain causal
    forwards, cheaper than tree attention on a CPU), each row's best chain (the best child at each
    depth) is weighed against the tree too, and the batch takes whichever pays more. On a fixed step:
    each row's best chain, as long as its slots (suite.loop.DecodeState.fixed_step)."""
    if not trees:
        return {}
    free = [state.draft_slots(b) for b in trees]
    max_nodes = min([max_nodes] + [f for f in free if f is not None])     # a fixed step's slots
    if state.fixed_step:               # chains only (DecodeState.fixed_step), every slot free: the best path
        return {b: _subtree(t, _best_chain(t)[:max_nodes]) for b, t in trees.items()}
    order = {}
    for b, t in trees.items():
        depth = t.depth()
        order[b] = sorted(range(len(t.tokens)), key=lambda i: (-t.scores[i], depth[i], i))[:max_nodes]
    if curve is None:
        return {b: _subtree(t, order[b]) for b, t in trees.items()}
    n, rate = _best_cut({b: [trees[b].scores[i] for i in order[b]] for b in trees}, curve)
    if chain_curve is not None:
        chains = {b: _best_chain(t)[:max_nodes] for b, t in trees.items()}
        n_chain, rate_chain = _best_cut({b: [trees[b].scores[i] for i in c] for b, c in chains.items()}, chain_curve)
        if rate_chain > rate:
            return {b: _subtree(t, chains[b][:n_chain]) for b, t in trees.items()}
    return {b: _subtree(t, order[b][:n]) for b, t in trees.items()}


def _best_cut(scores: dict[int, list[float]], curve) -> tuple[int, float]:
    """(n, expected tokens per second) of the best common count of nodes, scores best first."""
    gains = []
    for row in scores.values():
        total, acc = 0.0, [0.0]
        for x in row:
            total += x
            acc.append(total)
        gains.append(acc)
    n = best_size(gains, curve)
    rows = len(gains)
    return n, rows * min(1 + g[min(n, len(g) - 1)] for g in gains) / curve.step(rows, 1 + n)


def _best_chain(tree: DraftTree) -> list[int]:
    """The nodes of the path that follows the best-scored child from the root."""
    return best_path(tree.parents, tree.scores)


def best_path(parents: list[int], scores: list[float]) -> list[int]:
    """The nodes (parents[i] -1: a root) of the path that follows the best-scored child from the root."""
    kids: dict[int, list[int]] = {}
    for i, par in enumerate(parents):
        kids.setdefault(par, []).append(i)
    node, path = -1, []
    while kids.get(node):
        node = max(kids[node], key=lambda i: scores[i])
        path.append(node)
    return path


def _subtree(tree: DraftTree, keep: list[int]) -> DraftTree:
    """The nodes `keep` (ancestor-closed), laid out parents first."""
    depth = tree.depth()
    keep = sorted(keep, key=lambda i: (depth[i], i))
    local = {old: new for new, old in enumerate(keep)}
    out = DraftTree(num_pending=tree.num_pending)
    for old in keep:
        par = tree.parents[old]
        out.tokens.append(tree.tokens[old])
        out.parents.append(-1 if par < 0 else local[par])
        out.scores.append(tree.scores[old]), out.ranks.append(tree.ranks[old]), out.sources.append(tree.sources[old])
    return out


def tree_draft(state: DecodeState, trees: dict[int, DraftTree]) -> Draft:
    """Pending tokens ++ each row's tree in one draft; a row whose tree is a chain keeps the plain
    causal mask (and an unpadded batch of chains the model's own)."""
    rows, positions, masks, meta = [], [], [], []
    for b in range(state.batch):
        if state.done[b]:
            rows.append([]), positions.append([]), masks.append(None), meta.append(DraftTree())
            continue
        pending = state.pending(b)
        first, p = state.num_cached[b], len(pending)
        t = trees.get(b) or DraftTree()
        t.num_pending = p
        rows.append(pending + t.tokens)
        positions.append(list(range(first, first + p)) + [first + p - 1 + d for d in t.depth()])
        meta.append(t)
        if t.is_chain:
            masks.append(None)
            continue
        # the pending tokens a chain, the tree's roots below the last one: a node sees the pending
        # tokens, itself and its ancestors
        parents = list(range(-1, p - 1)) + [p + par if par >= 0 else p - 1 for par in t.parents]
        masks.append(tree_mask(parents, device=state.device))
    active = [t.num_pending - 1 for t in meta if t.num_pending > 0]
    return Draft.from_rows(rows, positions, masks if any(m is not None for m in masks) else None, meta=meta,
                           logits_from=min(active, default=0), device=state.device)


def verify_trees(state: DecodeState, draft: Draft, logits: torch.Tensor, targets: list[list[int]] | None = None
                 ) -> tuple[Acceptance, list[list[int]]]:
    """Walk every row's tree from the root; returns the acceptance and each row's accepted nodes.
    targets: the argmax of every logit slot per row (greedy; computed here when None)."""
    greedy = state.params.greedy
    if greedy and targets is None:
        targets = logits.argmax(-1).tolist()
    committed, paths, kept_slots = [], [], []
    for b in range(state.batch):
        t: DraftTree = draft.meta[b]
        if state.done[b] or t.num_pending == 0:
            committed.append([]), paths.append([]), kept_slots.append([])
            continue
        new, path = walk_tree(state, b, t, logits[b], targets[b] if greedy else None, draft.logits_from)
        committed.append(new), paths.append(path)
        kept_slots.append(list(range(t.num_pending)) + [t.num_pending + i for i in path])
    if all(s == list(range(len(s))) for s in kept_slots):      # every row keeps a prefix of its slots
        kept = [len(s) for s in kept_slots]
        if kept == draft.lengths:
            return Acceptance(committed, draft.valid, kept), paths
        n = draft.valid.shape[1]
        keep = torch.arange(n, device=draft.valid.device)[None] < torch.tensor(kept, device=draft.valid.device)[:, None]
        return Acceptance(committed, keep, kept), paths
    keep = [[False] * draft.valid.shape[1] for _ in range(state.batch)]
    for b, slots in enumerate(kept_slots):
        for s in slots:
            keep[b][s] = True
    return Acceptance(committed, torch.tensor(keep, dtype=torch.bool, device=draft.valid.device)), paths


def walk_tree(state: DecodeState, b: int, t, logits: torch.Tensor, targets, offset: int):
    """From the root of one row's verified tree `t` (`tokens`, `parents` with -1 for the root,
    `num_pending`: a DraftTree or eagle's Tree), follow accepted children: greedy by `targets`
    (the argmax per slot), else by the multi-draft rule (row b's uniforms at each position); returns
    the new tokens and the accepted nodes."""
    children: dict[int, list[int]] = {}
    for i, par in enumerate(t.parents):
        children.setdefault(par, []).append(i)
    node, new, path = -1, [], []
    while True:
        slot = (t.num_pending - 1 if node < 0 else t.num_pending + node) - offset
        kids = children.get(node, [])
        if targets is not None:
            token = targets[slot]
            nxt = next((c for c in kids if t.tokens[c] == token), None)
        else:
            p = logits_to_probs(logits[slot], state.params)
            u = state.streams.row(b, len(state.tokens[b]) + len(path), ACCEPT, len(kids) + 1)
            token, ok = accept_multi_draft(p, [t.tokens[c] for c in kids], u)
            nxt = next((c for c in kids if t.tokens[c] == token), None) if ok else None
        new.append(token)
        if nxt is None:
            return new, path
        path.append(nxt)
        node = nxt


class NodeRates:
    """Conditional acceptance rates of draft nodes by (kind, depth, rank): the chance a node is
    accepted given its parent was, from decayed counts on a Beta prior (mean `prior(rank)`, weight
    `strength`), so a fresh request starts hopeful but not certain and a failing drafter fades."""

    def __init__(self, depth: int = 8, ranks: int = 8, prior=lambda rank: 0.5 / (1 + rank), strength: float = 2.0,
                 decay: float = 0.97):
        self.depth, self.ranks, self.prior, self.strength, self.decay = depth, ranks, prior, strength, decay
        self.hits: dict[tuple, float] = {}
        self.tries: dict[tuple, float] = {}

    def _key(self, kind, depth: int, rank: int) -> tuple:
        return kind, min(depth, self.depth) - 1, min(rank, self.ranks - 1)

    def rate(self, kind, depth: int, rank: int) -> float:
        key = self._key(kind, depth, rank)
        return (self.hits.get(key, 0.0) + self.prior(rank) * self.strength) / (self.tries.get(key, 0.0) + self.strength)

    def update(self, tree: DraftTree, path: list[int], kinds: list) -> None:
        """After a verification: every drafted child of the root and of each accepted node was tried;
        those on the path were hits. kinds[i]: node i's kind (its rate table)."""
        for key in self.tries:
            self.tries[key] *= self.decay
            self.hits[key] *= self.decay
        reached = {-1} | set(path)
        on_path = set(path)
        depth = tree.depth()
        for i, par in enumerate(tree.parents):
            if par in reached:
                key = self._key(kinds[i], depth[i], tree.ranks[i])
                self.tries[key] = self.tries.get(key, 0.0) + 1.0
                self.hits[key] = self.hits.get(key, 0.0) + float(i in on_path)


def bind_tree_costs(decoder, model):
    """`decoder` with `cost` resolved for tree forwards (custom masks) and `chain_cost` for plain
    causal ones (suite.cost.bind_cost)."""
    return replace(bind_cost(decoder, model, masked=True), chain_cost=bind_cost(decoder, model).cost)
