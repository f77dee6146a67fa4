"""Locus: box coordinates drafted, then verified by Jacobi iteration over the shared image prefix
(seed paper C2 in docs/reference/seed-papers.md: "the fixed point is the model's greedy
coordinate-token answer", "5.60 sequential passes on average instead of 18.46 decoding steps").

Locus drafts a box with a regression head of the same weights; here the draft comes from the
model's own parallel box slots (the MASK slots of `parallel_box`: one forward guesses every
coordinate of a block). Each forward then carries, per row, the pending token, the drafts of the
rest of the current box as clean causal slots, and B-1 MASK slots for the next box:

  * the causal chain verifies the drafts: the prefix the model agrees with is kept, plus the
    model's own token at the first disagreement (point-mass drafts, SpecInfer's multi-draft rule:
    greedy, the argmax chain; sampling, exact in distribution);
  * `alternatives` / `modes` > 0 make the chain a tree: each drafted slot also carries its next
    most likely values (the draft distribution's runners-up, mostly grid neighbours) and the peaks
    of its other modes (values more than `mode_radius` away: another object's edge), each of
    probability >= `min_alternative`. A branch takes one of them and continues with the main drafts
    after it; branches are chosen best first (SpecInfer / Sequoia: the most likely draft paths,
    here under the per-slot drafts q renormalised over the values the tree can verify) while their
    slots fit `tree_slots`, branches of branches included, so a box drafted one grid step off in
    two coordinates, or with one edge from another object, is verified in the same forward;
  * the drafts after a disagreement are guessed again from the same forward (the path's own
    predictions at those slots, given the draft before them: Jacobi iteration), with their
    runners-up as alternatives, and verified by the next forward;
  * when the drafts are kept whole (along the main chain or a branch), the path's last slot
    predicts the next box's head (the exact AR distribution) and the MASK slots draft that box:
    one forward per box when the drafts are right. The MASK slots see the main chain, so after a
    branch they drafted from a box one value off: still only a draft, verified like any other.

So the output is exactly `ar`'s (greedy: token for token; sampling: in distribution), and every
forward commits at least one token. The block layout comes from the adapter config (`bind`).
"""
from __future__ import annotations

import dataclasses
import heapq
import itertools
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from ..base import DecoderBase
from ...acceptance import accept_multi_draft
from ...loop import Acceptance, DecodeState, Draft
from ...random_streams import ACCEPT
from ...sampling import logits_to_probs
from .parallel_box import BoxLayout


@dataclass
class BoxTree:
    """One row's drafts of the rest of its box: per slot the `main` value, its runner-up values
    `alts` (most likely first) and the draft probabilities `probs` of [main value] + alts."""
    main: list[int] = field(default_factory=list)
    alts: list[list[int]] = field(default_factory=list)
    probs: list[list[float]] = field(default_factory=list)

    def cut(self, length: int) -> None:
        self.main, self.alts, self.probs = self.main[:length], self.alts[:length], self.probs[:length]


@dataclass
class LocusRow:
    tree: BoxTree = field(default_factory=BoxTree)   # the drafts of the rest of the current box
    fresh: bool = False                              # those drafts come straight from MASK slots


@dataclass
class TreeSlots:
    """Where a row's tree sits in its draft. Node i (slot pending + i) holds a value for box slot
    depth[i]; nodes 0..n-1 are the main chain; children[i] (children[-1]: the root's) lists the
    nodes below node i, the first one continuing the run it lies on."""
    pending: int
    values: list[int]
    depth: list[int]
    parent: list[int]                        # -1: below the root (the last pending token)
    children: dict[int, list[int]]
    noisy: int                               # the first MASK slot (the rest of the row are MASK slots)

    def slot(self, node: int) -> int:
        return self.pending + node

    def descent(self, node: int) -> list[int]:
        """node, then its first child, that one's first child, ... to the tree's bottom."""
        out = [node]
        while self.children.get(out[-1]):
            out.append(self.children[out[-1]][0])
        return out


def grow_tree(tree: BoxTree, budget: int) -> tuple[list[int], list[int], list[int]]:
    """The draft tree (values, depths, parents): the main chain, then branches best first (SpecInfer
    / Sequoia's tree of the most likely drafts, here under independent per-slot drafts q, each
    renormalised over its slot's candidate values): a branch takes alternative a at depth j below
    node u and continues with the main values after j; it is walked when the verifier accepts u's
    path and picks a, which the drafts expect with probability q(path to u) * q_j(a). Branches are
    added in that order while their n - j slots fit `budget`, branches of branches included (a
    coordinate one grid step off after another one)."""
    n = len(tree.main)
    probs = [[q / sum(qs) for q in qs] for qs in tree.probs]     # q over the values the tree can verify
    values, depth, parent, reach = list(tree.main), list(range(n)), list(range(-1, n - 1)), []
    p = 1.0
    for j in range(n):
        reach.append(p)                      # q of the path down to (not including) depth j
        p *= probs[j][0]
    order = itertools.count()                # ties: the earlier candidate first
    heap = [(-reach[j] * q, next(order), j, j - 1, a) for j in range(n)
            for a, q in zip(tree.alts[j], probs[j][1:])]
    heapq.heapify(heap)
    while heap and budget > 0:
        score, _, j, under, a = heapq.heappop(heap)
        if n - j > budget:
            continue
        budget -= n - j
        prob = -score
        for d, v in enumerate([a] + tree.main[j + 1:], start=j):
            node = len(values)
            values.append(v), depth.append(d), parent.append(under)
            if d > j:                        # the runners-up of this continuation slot branch off here
                for alt, q in zip(tree.alts[d], probs[d][1:]):
                    heapq.heappush(heap, (-prob * q, next(order), d, under, alt))
                prob *= probs[d][0]
            under = node
    return values, depth, parent


def tree_row(num_pending: int, tree: BoxTree, budget: int, num_noisy: int, device: torch.device
             ) -> tuple[list[int | None], list[int], torch.Tensor, TreeSlots]:
    """A row's drafted values (None: a MASK slot), position offsets from its first pending token,
    (N, N) mask and slot map. Pending slots are causal; a tree node sees the pending slots, its
    ancestors and itself; MASK slots see the pending slots, the main chain and each other."""
    P, n = num_pending, len(tree.main)
    nodes, depth, parent = grow_tree(tree, budget)
    values, offsets = [None] * P + nodes, list(range(P)) + [P + d for d in depth]
    seen = [list(range(i + 1)) for i in range(P)]
    children: dict[int, list[int]] = {}
    for i, u in enumerate(parent):
        children.setdefault(u, []).append(i)
        seen.append(list(range(P)) + [P + i] + (seen[P + u][P:] if u >= 0 else []))
    noisy = len(values)
    for k in range(num_noisy):
        values.append(None)
        offsets.append(P + n + k)
        seen.append(list(range(P + n)) + list(range(noisy, noisy + num_noisy)))
    visible = [[False] * len(values) for _ in values]        # built on the host, sent to the device once
    for i, cols in enumerate(seen):
        for j in cols:
            visible[i][j] = True
    mask = torch.tensor(visible, dtype=torch.bool, device=device).reshape(len(values), len(values))
    return values, offsets, mask, TreeSlots(P, nodes, depth, parent, children, noisy)


def runners_up(logits: torch.Tensor, count: int, floor: float, modes: int = 0, radius: int = 0
               ) -> tuple[list[int], list[list[int]], list[list[float]]]:
    """(K, V) logits -> per slot its argmax, its alternatives and the probabilities of [argmax] +
    alternatives. Alternatives: up to `count` next most likely values, then up to `modes` values
    more than `radius` token ids away from every value chosen so far (the peaks of other modes of
    a coordinate's draft: another object's edge), all of probability >= floor."""
    top = torch.softmax(logits.float(), -1).topk(min(logits.shape[-1], count + 1 + 64 * (modes > 0)), dim=-1)
    best, alts, probs = top.indices[:, 0].tolist(), [], []
    for vs, ps in zip(top.indices.tolist(), top.values.tolist()):
        keep = [k for k in range(1, min(count + 1, len(vs))) if ps[k] >= floor]
        chosen, peaks = [vs[0]] + [vs[k] for k in keep], 0
        for k in range(count + 1, len(vs)):
            if peaks == modes or ps[k] < floor:
                break
            if all(abs(vs[k] - c) > radius for c in chosen):
                keep.append(k), chosen.append(vs[k])
                peaks += 1
        alts.append([vs[k] for k in keep])
        probs.append([ps[0]] + [ps[k] for k in keep])
    return best, alts, probs


@dataclass(frozen=True)
class Locus(DecoderBase):
    alternatives: int = 2           # runner-up values per drafted slot, each on its own branch (0: a chain)
    min_alternative: float = 0.01   # an alternative below this draft probability gets no branch
    tree_slots: int = 60            # slots the branches may take per row and forward, most likely first
    modes: int = 2                  # values of other modes per drafted slot (more than mode_radius away)
    mode_radius: int = 12           # token ids (grid values) around a chosen value that are its neighbours
    layout: Any = None              # BoxLayout; default: from the adapter config (bind)

    name: ClassVar[str] = "locus"
    requires: ClassVar[frozenset] = frozenset({"custom_mask"})

    def bind(self, adapter) -> "Locus":
        return self if self.layout is not None else dataclasses.replace(self, layout=BoxLayout.of(adapter))

    def start(self, state: DecodeState) -> None:
        if self.layout is None:
            raise ValueError("locus needs a box layout: bind it to a grounding adapter (decoder.bind(adapter))")
        counts = {"alternatives": self.alternatives, "tree_slots": self.tree_slots, "modes": self.modes,
                  "mode_radius": self.mode_radius}
        if min(counts.values()) < 0 or not 0 <= self.min_alternative <= 1:
            raise ValueError(f"{', '.join(counts)} must be >= 0 and min_alternative in [0, 1], got "
                             f"{counts}, min_alternative={self.min_alternative}")
        state.rows = [LocusRow() for _ in range(state.batch)]

    def propose(self, state: DecodeState) -> Draft:
        """Per row: its pending tokens, its drafts as a tree, the next box's B-1 MASK slots (fewer
        when the row's room ends first)."""
        rows, positions, masks, slots = [], [], [], []
        for b in range(state.batch):
            if state.done[b]:
                rows.append([]), positions.append([]), masks.append(None), slots.append(None)
                continue
            tree, room = state.rows[b].tree, state.room(b) - 1
            tree.cut(max(0, room))
            pending = state.pending(b)
            num_noisy = max(0, min(self.layout.block_size - 1, room - len(tree.main)))
            values, offsets, mask, where = tree_row(len(pending), tree, self.tree_slots, num_noisy, state.device)
            rows.append(pending + [self.layout.mask_token_id if v is None else v for v in values[len(pending):]])
            positions.append([state.num_cached[b] + o for o in offsets])
            masks.append(mask), slots.append(where)
        active = [s.pending - 1 for s in slots if s is not None and s.pending > 0]
        return Draft.from_rows(rows, positions, masks, meta=slots, logits_from=min(active, default=0),
                               device=state.device)

    def accept(self, state: DecodeState, draft: Draft, logits) -> Acceptance:
        committed, keep = [], torch.zeros_like(draft.valid)
        for b in range(state.batch):
            if state.done[b]:
                committed.append([])
                continue
            where: TreeSlots = draft.meta[b]
            out, kept = self._verify(state, b, logits[b], draft.logits_from, int(draft.valid[b].sum()), where)
            keep[b, :where.pending] = where.pending > 0
            keep[b, kept] = True
            committed.append(out)
        return Acceptance(committed, keep)

    def _verify(self, state: DecodeState, b: int, logits: torch.Tensor, first: int, num_slots: int,
                where: TreeSlots) -> tuple[list[int], list[int]]:
        """Walk row b's tree (num_slots draft slots): (tokens to commit, draft slots whose K/V
        stays); sets its next drafts. logits[s - first] is what slot s predicts."""
        row = state.rows[b]
        tree = row.tree
        n, node, path, out = len(tree.main), -1, [], []
        for j in range(n):
            p = logits_to_probs(logits[(where.slot(node) if j else where.pending - 1) - first], state.params)
            below = where.children[node]
            u = state.streams.row(b, len(state.tokens[b]) + j, ACCEPT, len(below) + 1)   # keyed by position
            token, ok = accept_multi_draft(p, [where.values[c] for c in below], u)
            out.append(token)
            if not ok:                        # AR's own token; the later slots guessed again (Jacobi)
                if row.fresh:
                    state.stats.count("box_fallbacks")     # a box whose parallel draft needed correcting
                row.fresh = False
                guess = [where.slot(c) - first for c in where.descent(below[0])[:n - 1 - j]]
                tree.main, tree.alts, tree.probs = self._guesses(logits, guess)
                return out, [where.slot(c) for c in path]
            if token != where.values[below[0]]:
                state.stats.count("box_branches")
            node = next(c for c in below if where.values[c] == token)
            path.append(node)
        p = logits_to_probs(logits[(where.slot(node) if n else where.pending - 1) - first], state.params)
        head, _ = accept_multi_draft(p, [], state.streams.row(b, len(state.tokens[b]) + n, ACCEPT, 1))
        out.append(head)
        row.fresh = head not in state.eos_token_ids and num_slots > where.noisy
        tree.main, tree.alts, tree.probs = self._guesses(
            logits, list(range(where.noisy - first, num_slots - first)) if row.fresh else [])
        if row.fresh:
            state.stats.count("box_blocks")
        return out, [where.slot(c) for c in path]

    def _guesses(self, logits: torch.Tensor, rows: list[int]) -> tuple[list[int], list[list[int]], list[list[float]]]:
        """Drafts from the given logit rows: their argmax values, runners-up and probabilities."""
        return (runners_up(logits[rows], self.alternatives, self.min_alternative, self.modes, self.mode_radius)
                if rows else ([], [], []))
