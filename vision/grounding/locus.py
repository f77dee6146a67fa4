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
  * `alternatives` > 0 makes the chain a tree: each drafted slot also carries its next most likely
    values (the draft distribution's runners-up of probability >= `min_alternative`), each on a
    branch that continues with the main drafts after it, so a coordinate the draft got one grid
    step wrong is corrected and the rest of the box verified in the same forward;
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
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from suite.acceptance import accept_multi_draft
from suite.loop import Acceptance, DecodeState, Draft
from suite.sampling import logits_to_probs
from .parallel_box import BoxLayout


@dataclass
class BoxTree:
    """One row's drafts of the rest of its box: `main` values, and per slot the alternative values
    whose branch continues with main's later values."""
    main: list[int] = field(default_factory=list)
    alts: list[list[int]] = field(default_factory=list)


@dataclass
class TreeSlots:
    """Where a row's tree sits in its draft (slot indices from the row's first pending token)."""
    pending: int                             # pending tokens; main value j is at slot pending + j
    branches: dict[tuple[int, int], int]     # (j, value) -> slot of that alternative; its branch follows
    noisy: int                               # the first MASK slot (the rest of the row are MASK slots)

    def path(self, length: int, branch: tuple[int, int] | None) -> list[int]:
        """The slots holding drafted values 0..length-1 along the main chain, or along `branch`
        (j, slot) from value j on."""
        if branch is None:
            return [self.pending + p for p in range(length)]
        j, start = branch
        return [self.pending + p if p < j else start + p - j for p in range(length)]


def tree_row(num_pending: int, tree: BoxTree, num_noisy: int, device: torch.device
             ) -> tuple[list[int | None], list[int], torch.Tensor, TreeSlots]:
    """A row's drafted values (None: a MASK slot), position offsets from its first pending token,
    (N, N) mask and slot map. Pending slots are causal; main value j sees pending and main values
    <= j; a branch at j sees pending, main values < j and its own slots before; MASK slots see
    pending, the whole main chain and each other."""
    P, n = num_pending, len(tree.main)
    values, offsets = [None] * P + list(tree.main), list(range(P + n))
    seen = [list(range(i + 1)) for i in range(P + n)]
    branches = {}
    for j, alts in enumerate(tree.alts):
        for a in alts:
            start = branches[(j, a)] = len(values)
            run = [a] + tree.main[j + 1:]
            for t in range(len(run)):
                offsets.append(P + j + t)
                seen.append(list(range(P + j)) + list(range(start, start + t + 1)))
            values += run
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
    return values, offsets, mask, TreeSlots(P, branches, noisy)


def runners_up(logits: torch.Tensor, count: int, floor: float) -> tuple[list[int], list[list[int]]]:
    """(K, V) logits -> per slot its argmax, and up to `count` next most likely values of
    probability >= floor."""
    top = torch.softmax(logits.float(), -1).topk(count + 1, dim=-1)
    best = top.indices[:, 0].tolist()
    alts = [[v for v, p in zip(vs[1:], ps[1:]) if p >= floor] for vs, ps in zip(top.indices.tolist(), top.values.tolist())]
    return best, alts


@dataclass(frozen=True)
class Locus:
    alternatives: int = 2           # runner-up values per drafted slot, each on its own branch (0: a chain)
    min_alternative: float = 0.05   # a runner-up below this draft probability gets no branch
    layout: Any = None              # BoxLayout; default: from the adapter config (bind)

    name: ClassVar[str] = "locus"
    requires: ClassVar[frozenset] = frozenset({"custom_mask"})

    def bind(self, adapter) -> "Locus":
        return self if self.layout is not None else dataclasses.replace(self, layout=BoxLayout.of(adapter))

    def start(self, state: DecodeState) -> None:
        if self.layout is None:
            raise ValueError("locus needs a box layout: bind it to a grounding adapter (decoder.bind(adapter))")
        if self.alternatives < 0 or not 0 <= self.min_alternative <= 1:
            raise ValueError("alternatives must be >= 0 and min_alternative in [0, 1], got "
                             f"{self.alternatives}, {self.min_alternative}")
        state.scratch["trees"] = [BoxTree() for _ in range(state.batch)]
        state.scratch["fresh"] = [False] * state.batch                 # drafts straight from MASK slots

    def propose(self, state: DecodeState) -> Draft:
        """Per row: its pending tokens, its drafts as a tree, the next box's B-1 MASK slots (fewer
        when the row's room ends first)."""
        rows, positions, masks, slots = [], [], [], []
        for b in range(state.batch):
            if state.done[b]:
                rows.append([]), positions.append([]), masks.append(None), slots.append(None)
                continue
            tree, room = state.scratch["trees"][b], state.room(b) - 1
            tree.main, tree.alts = tree.main[:max(0, room)], tree.alts[:max(0, room)]
            pending = state.pending(b)
            num_noisy = max(0, min(self.layout.block_size - 1, room - len(tree.main)))
            values, offsets, mask, where = tree_row(len(pending), tree, num_noisy, state.device)
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
        tree, fresh = state.scratch["trees"][b], state.scratch["fresh"]
        n, branch, out = len(tree.main), None, []
        for j, value in enumerate(tree.main):
            before = where.path(j, branch)
            p = logits_to_probs(logits[(before[-1] if j else where.pending - 1) - first], state.params)
            token, ok = accept_multi_draft(p, [value] + (tree.alts[j] if branch is None else []), state.generator)
            out.append(token)
            if not ok:                        # AR's own token; the later slots guessed again (Jacobi)
                if fresh[b]:
                    state.stats.count("box_fallbacks")     # a box whose parallel draft needed correcting
                fresh[b] = False
                tree.main, tree.alts = self._guesses(logits, [s - first for s in where.path(n, branch)[j:n - 1]])
                return out, before
            if branch is None and token != value:
                branch = (j, where.branches[(j, token)])
                state.stats.count("box_branches")
        path = where.path(n, branch)
        p = logits_to_probs(logits[(path[-1] if n else where.pending - 1) - first], state.params)
        head, _ = accept_multi_draft(p, [], state.generator)
        out.append(head)
        fresh[b] = head not in state.eos_token_ids and num_slots > where.noisy
        tree.main, tree.alts = self._guesses(logits, list(range(where.noisy - first, num_slots - first)) if fresh[b] else [])
        if fresh[b]:
            state.stats.count("box_blocks")
        return out, path

    def _guesses(self, logits: torch.Tensor, rows: list[int]) -> tuple[list[int], list[list[int]]]:
        """Drafts from the given logit rows: their argmax values and runners-up."""
        return runners_up(logits[rows], self.alternatives, self.min_alternative) if rows else ([], [])
