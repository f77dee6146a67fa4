"""EAGLE-2 (Li et al. 2024, "EAGLE-2: Faster Inference of Language Models with Dynamic Draft
Trees") over the EAGLE draft head of eagle_head.py.

Each step:
  1. the head catches up on the pairs (f_j, x_{j+1}) the last verification made known (the
     target's last hidden state at each accepted slot, the token after it): its output at the
     last pair predicts the features after the newest token;
  2. a draft tree grows depth by depth: the `top_k` best children of every expanded node, then
     the `top_k` nodes of the new depth with the highest path score (the product of draft
     probabilities along the path) are expanded with one head forward; growth stops at `depth`
     or once no frontier node is likely enough to pay for another head forward (a head forward
     priced by the share of the target's weights it reads: suite.cost.weight_share, no clock);
  3. the best nodes by path score form the tree the target verifies in ONE forward, with a tree
     mask (each node sees the cached context, the pending token and its ancestors); the cost
     model (suite/cost.py) picks how many, maximising expected tokens per second, calibrated by
     the request's running ratio of accepted to predicted tokens; none = a plain step;
  4. verification walks the tree from the root: greedy follows the target's argmax (output equal
     to `ar`); sampling applies the multi-draft rule to each node's children (the candidates are
     deterministic functions of the context, so each is a point mass): lossless.
The loop returns the target's hidden states (Draft.want_hidden), which feed step 1 next time.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

import torch

from ...models.adapters import HFCausalLM
from ...cost import best_size, bind_cost
from ...models.linear_forms import swap_linears
from ...loop import Acceptance, DecodeState, Draft
from ...constraint import draft_masks
from .base import chain_draft, room_for_guesses
from .eagle_head import EagleHead
from .tree import best_path, walk_tree
from ..base import DecoderBase

TRAIN_HINT = "python -m text.train_draft"


@dataclass
class Tree:
    """One row's verified tree: node i has `tokens[i]`, `parents[i]` (-1: the root, the newest
    committed token) and sits at draft slot num_pending + i."""

    num_pending: int = 0
    tokens: list[int] = None
    parents: list[int] = None
    predicted: float = 0.0      # the draft's own expected accepted length (sum of path probabilities)


@dataclass
class EagleRow:
    fed: int = 0                               # pairs (f_j, x_{j+1}) in the head cache: j < fed
    features: torch.Tensor | None = None       # (n, D) target features of positions fed.. not fed yet


@dataclass
class EagleShared:
    """The head's KV cache, batched over rows (slot j of row b is real where valid[b, j]), and the
    calibration of path scores and the head's cost, which the whole request shares."""
    k: torch.Tensor                            # (B, Hk, S, d)
    v: torch.Tensor                            # (B, Hk, S, d)
    valid: torch.Tensor                        # (B, S) bool
    accepted: float = 1.0                      # tokens accepted / predicted: the calibration ratio
    predicted: float = 1.0

    def select(self, index: list[int]) -> None:
        """Keep the head cache's rows `index` (each row's `fed` and pending features move with its EagleRow)."""
        idx = torch.tensor(index, dtype=torch.long, device=self.valid.device)
        self.k, self.v, self.valid = self.k[idx], self.v[idx], self.valid[idx]

    def extend(self, other: "EagleShared") -> None:
        """Append `other`'s head-cache rows: the shorter side's slot axis is padded with dead slots
        (valid False; a slot's place never matters: the head's attention reads positions, and its
        mask reads `valid`). The calibration counts are pooled (each side starts from the same 1/1
        prior, counted once)."""
        n = max(self.valid.shape[1], other.valid.shape[1])
        self.k = torch.cat([_pad_slots(self.k, n, 2), _pad_slots(other.k.to(self.k.device), n, 2)])
        self.v = torch.cat([_pad_slots(self.v, n, 2), _pad_slots(other.v.to(self.v.device), n, 2)])
        self.valid = torch.cat([_pad_slots(self.valid, n, 1), _pad_slots(other.valid.to(self.valid.device), n, 1)])
        self.accepted += other.accepted - EagleShared.accepted     # the fields' defaults: the prior
        self.predicted += other.predicted - EagleShared.predicted


def _pad_slots(t: torch.Tensor, n: int, dim: int) -> torch.Tensor:
    """`t` with its slot axis `dim` padded to n with zeros (False: dead slots)."""
    missing = n - t.shape[dim]
    if missing <= 0:
        return t
    shape = list(t.shape)
    shape[dim] = missing
    return torch.cat([t, t.new_zeros(shape)], dim)


@dataclass(frozen=True)
class Eagle(DecoderBase):
    draft_head: Any = None   # an EagleHead, or the folder of its weights (text.load() binds SmolLM2's)
    top_k: int = 4           # children per expanded node, and nodes expanded per depth
    depth: int = 6           # deepest draft
    max_nodes: int = 16      # tree nodes verified per step at most
    cost: Any = "auto"       # the target's CostCurve ("auto": measured at bind; None: always max_nodes)

    name: ClassVar[str] = "eagle"
    requires: ClassVar[frozenset] = frozenset({"custom_mask", "hidden_states"})

    @property
    def batch_independent(self) -> bool:
        """Rows share forwards when seeded (suite.scheduler) only with fixed sizes: a cost curve sizes
        every row's tree from the live rows' acceptance rates."""
        return self.cost is None

    def bind(self, target) -> "Eagle":
        """Load the head (a folder), check it against the target and borrow its embeddings."""
        head = self.draft_head
        if head is None:
            raise ValueError("eagle needs draft_head= (an EagleHead or the folder of its weights); for the "
                             f"embedded SmolLM2 text.load() finds text/weights/eagle (made by {TRAIN_HINT})")
        if isinstance(head, (str, Path)):
            head = EagleHead.from_folder(head, TRAIN_HINT)
        hf = target.model if isinstance(target, HFCausalLM) else target
        if not hasattr(hf, "get_output_embeddings"):
            raise ValueError(f"eagle drafts for transformers causal LMs; got a {type(hf).__name__}")
        if head.embed is None or head.embed.data_ptr() != hf.get_input_embeddings().weight.data_ptr():
            device = hf.get_input_embeddings().weight.device
            head = head.to(device).bind_target(hf)
            swap_linears(head)   # the fastest matmul form per width on a CPU (a no-op elsewhere)
        return bind_cost(replace(self, draft_head=head), target, masked=True)

    def start(self, state: DecodeState) -> None:
        if self.top_k < 1 or self.depth < 1 or self.max_nodes < 0:
            raise ValueError("eagle needs top_k >= 1, depth >= 1, max_nodes >= 0")
        if not isinstance(self.draft_head, EagleHead) or self.draft_head.embed is None:
            raise ValueError("eagle's draft head is not bound to a target: pass the decoder through "
                             "suite.generate / suite.prepare (which call bind)")
        h = self.draft_head
        dev = h.fc.weight.device
        # a prefix reused from suite.prefix_cache has no target features: the head starts after it
        state.rows = [EagleRow(fed=state.num_cached[b]) for b in range(state.batch)]
        state.shared = EagleShared(k=torch.zeros(state.batch, h.kv_heads, 0, h.head_dim, device=dev),
                                   v=torch.zeros(state.batch, h.kv_heads, 0, h.head_dim, device=dev),
                                   valid=torch.zeros(state.batch, 0, dtype=torch.bool, device=dev))

    # -- propose -------------------------------------------------------------------------------------

    def propose(self, state: DecodeState) -> Draft:
        if all(row.features is None for row in state.rows):   # the prefill: no target features yet
            draft = chain_draft(state, [[] for _ in range(state.batch)])
            draft.meta = [Tree(len(state.pending(b)) if not state.done[b] else 0, [], []) for b in range(state.batch)]
            draft.want_hidden = True
            return draft
        with torch.no_grad():
            t0 = time.perf_counter()
            root = self._catch_up(state)                                             # (B, D)
            rows = [b for b in range(state.batch) if not state.done[b] and room_for_guesses(state, b, 1)]
            trees = self._grow(state, root, rows)
            state.stats.draft_time_s += time.perf_counter() - t0
        return self._tree_draft(state, trees)

    def _catch_up(self, state) -> torch.Tensor:
        """Feed every known pair to the head (appending its K/V); the output at each row's last pair."""
        h, s = self.draft_head, state.shared
        feats, toks, pos, lengths = [], [], [], []
        for b, row in enumerate(state.rows):
            f = row.features
            n = 0 if f is None else f.shape[0]
            fed = row.fed
            feats.append(f), toks.append(state.tokens[b][fed + 1:fed + 1 + n]), pos.append(list(range(fed, fed + n)))
            lengths.append(n)
            row.fed = fed + n
            row.features = None
        m = max(lengths)
        dev = h.fc.weight.device
        if m == 0:
            return torch.zeros(state.batch, h.config["hidden_size"], device=dev)
        feature = torch.zeros(state.batch, m, h.config["hidden_size"], device=dev)
        for b, f in enumerate(feats):
            if f is not None and len(f):
                feature[b, :len(f)] = f.to(dev, feature.dtype)
        tokens = torch.tensor([t + [0] * (m - len(t)) for t in toks], device=dev)
        positions = torch.tensor([p + [0] * (m - len(p)) for p in pos], device=dev)
        real = torch.arange(m, device=dev)[None] < torch.tensor(lengths, device=dev)[:, None]   # (B, M)
        own = torch.ones(m, m, dtype=torch.bool, device=dev).tril()[None] & real[:, None, :]
        own |= torch.eye(m, dtype=torch.bool, device=dev)[None]          # padding sees itself (no empty rows)
        mask = torch.cat([s.valid[:, None, :].expand(-1, m, -1), own], 2)[:, None]
        out, s.k, s.v = h.step(feature, tokens, positions, mask, past=(s.k, s.v), return_kv=True)
        s.valid = torch.cat([s.valid, real], 1)
        last = (torch.tensor(lengths, device=dev) - 1).clamp(min=0)
        return out[torch.arange(state.batch, device=dev), last]

    def _grow(self, state, root: torch.Tensor, rows: list[int]) -> dict[int, Tree]:
        """EAGLE-2's dynamic tree for each row in `rows`, cut to the size the cost model picks."""
        if not rows or self.max_nodes == 0:
            return {}
        h, k, s = self.draft_head, self.top_k, state.shared
        dev = root.device
        idx = torch.tensor(rows, device=dev)
        r = len(rows)
        caps = torch.tensor([room_for_guesses(state, b, self.depth) for b in rows], device=dev)
        keys, values, ctx_valid = s.k[idx], s.v[idx], s.valid[idx]    # the context's, then the tree's so far
        root_pos = torch.tensor([len(state.tokens[b]) - 1 for b in rows], device=dev)
        calib = s.accepted / s.predicted
        # depth 1: the root's top-k children; every node: token, parent node id (-1 root), depth, log-prob
        grammar = state.inputs.constraints       # structured output: the head drafts what the grammar allows
        logits = h.logits(root[idx]).float()
        t_mask = time.perf_counter()
        allowed = draft_masks(grammar, rows, [[()]] * r, h.vocab_ids)
        state.stats.mask_time_s += time.perf_counter() - t_mask
        if allowed is not None:
            logits = logits.masked_fill(~allowed[:, 0], -float("inf"))
        score, pick = torch.log_softmax(logits, -1).topk(k, -1)                                 # (R, k)
        tok, par, dep = [h.vocab_ids[pick]], [torch.full_like(pick, -1)], [torch.ones_like(pick)]
        scores = [score]
        frontier = torch.arange(k, device=dev)[None].expand(r, -1)     # node ids expanded next (R, k)
        feat = root[idx][:, None].expand(-1, k, -1)                    # their parents' outputs (R, k, D)
        vis = torch.eye(k, dtype=torch.bool, device=dev)[None].expand(r, -1, -1)   # ancestry among expanded
        for d in range(1, min(self.depth, int(caps.max()))):
            best = float(torch.cat(scores, 1).gather(1, frontier).max()) if d > 1 else float(score.max())
            if self.cost is not None and math.exp(best) * calib < h.price:
                break    # no frontier node is likely enough to pay for a head forward (both priced in target
                         # forwards: the same steps on every run)
            mask = torch.cat([ctx_valid[:, None, :].expand(-1, k, -1), vis], 2)[:, None]
            out, keys, values = h.step(feat, torch.cat(tok, 1).gather(1, frontier),
                                       (root_pos + d - 1)[:, None].expand(-1, k), mask, past=(keys, values),
                                       return_kv=True)
            logits = h.logits(out).float()
            if allowed is not None:
                t_mask = time.perf_counter()
                allowed = draft_masks(grammar, rows, _paths(torch.cat(tok, 1), torch.cat(par, 1), frontier), h.vocab_ids)
                state.stats.mask_time_s += time.perf_counter() - t_mask
                logits = logits.masked_fill(~allowed, -float("inf"))
            c_score, c_pick = torch.log_softmax(logits, -1).topk(k, -1)                         # (R, k, k)
            c_score = (torch.cat(scores, 1).gather(1, frontier)[..., None] + c_score).flatten(1)
            first = sum(t.shape[1] for t in tok)
            tok.append(h.vocab_ids[c_pick].flatten(1))
            par.append(frontier[..., None].expand(-1, -1, k).flatten(1))
            dep.append(torch.full_like(c_score, d + 1, dtype=torch.long))
            scores.append(c_score)
            # the next frontier: the best k children; a child's parent is expanded slot (child // k)
            sel = c_score.topk(k, -1).indices
            frontier = first + sel
            slot = sel // k
            feat = out.gather(1, slot[..., None].expand(-1, -1, out.shape[-1]))
            seen = vis.gather(1, slot[..., None].expand(-1, -1, vis.shape[-1]))     # the parent's ancestry
            vis = torch.cat([seen, torch.eye(k, dtype=torch.bool, device=dev)[None].expand(r, -1, -1)], 2)
        trees = self._select(torch.cat(tok, 1), torch.cat(par, 1), torch.cat(dep, 1), torch.cat(scores, 1),
                             caps, calib, rows, [state.draft_slots(b) for b in rows])
        return trees

    def _select(self, tok, par, dep, score, caps, calib, rows, free) -> dict[int, Tree]:
        """The best nodes by path score (ancestor-closed), as many as the cost model pays for,
        laid out by depth so every parent comes before its children; on a fixed step (its drafts are
        chains: DecodeState.fixed_step) the best path through them, cut to the step's slots."""
        key = torch.where(dep <= caps[:, None], score - 1e-4 * dep, torch.full_like(score, -float("inf")))
        slots = [f for f in free if f is not None]           # a fixed step's
        n_max = min(self.max_nodes, tok.shape[1])
        key, order = key.topk(n_max, -1)                                             # (R, n)
        probs = key.exp() * calib                                                    # 0 for too-deep nodes
        gains = [[0.0] + row for row in probs.cumsum(1).tolist()]
        n = n_max if self.cost is None or slots else best_size(gains, self.cost)
        order, probs = order[:, :n], probs[:, :n]
        ar = torch.arange(n, device=tok.device)
        order = order.gather(1, (dep.gather(1, order) * (n + 1) + ar).argsort(1))
        local = torch.full_like(par, -1).scatter(1, order, ar[None].expand(len(rows), -1))
        parents = par.gather(1, order)
        parents = torch.where(parents >= 0, local.gather(1, parents.clamp(min=0)), parents)
        alive = (dep.gather(1, order) <= caps[:, None]).tolist()
        toks, pars, pred = tok.gather(1, order).tolist(), parents.tolist(), probs.sum(1).tolist()
        if slots:
            return {b: _chain(toks[i], pars[i], probs[i].tolist(), min(slots)) for i, b in enumerate(rows)}
        return {b: Tree(0, [t for t, a in zip(toks[i], alive[i]) if a], [p for p, a in zip(pars[i], alive[i]) if a],
                        pred[i]) for i, b in enumerate(rows)}

    def _tree_draft(self, state, trees: dict[int, Tree]) -> Draft:
        rows, positions, masks, meta = [], [], [], []
        for b in range(state.batch):
            if state.done[b]:
                rows.append([]), positions.append([]), masks.append(None), meta.append(Tree(0, [], []))
                continue
            pending = state.pending(b)
            first = state.num_cached[b]
            t = trees.get(b, Tree(0, [], []))
            t.num_pending = len(pending)
            p = len(pending)
            depth = []
            for par in t.parents:
                depth.append(1 if par < 0 else depth[par] + 1)
            n = p + len(t.tokens)
            visible = [[j <= i for j in range(n)] for i in range(p)]   # on the host, sent to the device once
            for i, par in enumerate(t.parents):                        # a node sees the pending tokens,
                row = [j < p or j == p + i for j in range(n)]          # itself and its ancestors
                visible.append([a or c for a, c in zip(row, visible[p + par])] if par >= 0 else row)
            mask = torch.tensor(visible, dtype=torch.bool, device=state.device).reshape(n, n)
            rows.append(pending + t.tokens)
            positions.append(list(range(first, first + p)) + [first + p - 1 + d for d in depth])
            masks.append(mask), meta.append(t)
        active = [t.num_pending - 1 for t in meta if t.num_pending > 0]
        draft = Draft.from_rows(rows, positions, masks, meta=meta, logits_from=min(active, default=0),
                                device=state.device)
        draft.want_hidden = True
        return draft

    # -- accept ----------------------------------------------------------------------------------------

    def accept(self, state: DecodeState, draft: Draft, logits) -> Acceptance:
        s = state.shared
        keep = torch.zeros_like(draft.valid)
        committed = []
        greedy = state.params.greedy
        targets = logits.argmax(-1).tolist() if greedy else None
        for b in range(state.batch):
            t: Tree = draft.meta[b]
            if state.done[b] or t.num_pending == 0:
                committed.append([])
                continue
            new, path = walk_tree(state, b, t, logits[b], targets[b] if greedy else None, draft.logits_from)
            committed.append(new)
            keep[b, :t.num_pending] = True
            slots = list(range(t.num_pending)) + [t.num_pending + i for i in path]
            keep[b, slots] = True
            if t.tokens:
                s.accepted += len(path)
                s.predicted += t.predicted
        self.observe(state, draft, keep)
        return Acceptance(committed, keep)

    def observes(self, state: DecodeState) -> bool:
        """Whether a step this decoder did not draft (suite.loop's forced spans) must show it the kept
        slots' features (`observe`, with Draft.want_hidden): always."""
        return True

    def observe(self, state: DecodeState, draft: Draft, keep: torch.Tensor) -> None:
        """Record the target's features of the slots a step keeps (any decoder's step, as `auto`
        runs them): the head feeds on them at its next catch-up."""
        for b, row in enumerate(state.rows):
            slots = keep[b].nonzero().flatten()
            if state.done[b] or not len(slots):
                continue
            new = draft.hidden[b, slots.to(draft.hidden.device)]
            row.features = new if row.features is None else torch.cat([row.features, new])


def _paths(tok: torch.Tensor, par: torch.Tensor, nodes: torch.Tensor) -> list[list[tuple]]:
    """Per row, the tokens from the root to each node of `nodes` (R, n): a tree's draft paths."""
    tok, par = tok.tolist(), par.tolist()
    out = []
    for row_tok, row_par, row_nodes in zip(tok, par, nodes.tolist()):
        paths = []
        for node in row_nodes:
            path = []
            while node >= 0:
                path.append(row_tok[node])
                node = row_par[node]
            paths.append(tuple(reversed(path)))
        out.append(paths)
    return out


def _chain(tokens: list[int], parents: list[int], probs: list[float], slots: int) -> Tree:
    """The tree's best path (too-deep nodes have probability 0), at most `slots` nodes, as a chain."""
    path = [i for i in best_path(parents, probs) if probs[i] > 0][:slots]
    return Tree(0, [tokens[i] for i in path], list(range(-1, len(path) - 1)), sum(probs[i] for i in path))
