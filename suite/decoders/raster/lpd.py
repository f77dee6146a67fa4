"""LPD (Zhang et al. 2025, "Locality-aware Parallel Decoding for Efficient Autoregressive Image
Generation"): an H x W grid in a few steps, each step sampling a group of cells at once.

The prior is trained to answer *position queries*: query token `query_offset + cell`, placed at
the cell's own position, predicts that cell's code from the generated cells it may see. Step i
feeds, in one forward, the cells sampled at step i-1 (real tokens, kept in the cache) and the
queries of group i (their K/V is dropped after the step). The mask is block-causal over groups:
real tokens see every earlier group and their own group; queries see the real tokens of earlier
groups and each other ("mutual visibility" inside a group), never a later group.

The order is locality-aware (`lpd_order`): the first cell is random; each later group takes the
free cells closest to generated ones (proximity = sum of 1/distance to generated cells in the
8-neighbourhood, ties at random), skipping any within `repulsion` (Chebyshev) of a cell already
in the group, and fills what is left by farthest-point sampling. Group sizes follow the paper's
20-step 256-cell schedule, or a linear ramp for other grids and step counts.

Lossy: the cells of a group are sampled independently given the earlier groups, so the joint law
differs from `ar` (the price of 256 cells in 20 forwards); `vision.bench` measures the cost. It
needs a prior trained with position queries (`python -m vision.train lpd`), whose adapter names
`query_offset` and `grid` in `config.extra`.
"""
from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass
from typing import ClassVar

import torch

from ...loop import Acceptance, DecodeState, Draft
from ...random_streams import ORDER, SAMPLE, RowStreams
from ...sampling import logits_to_probs, sample
from .zipar import RasterCanvas, canvas_tokens, grid_of
from ..base import DecoderBase

# the paper's group sizes for a 16x16 grid in 20 steps (LPD, 256 px)
PAPER_GROUPS = {(256, 20): (1, 2, 4, 5, 7, 8, 10, 11, 12, 14, 15, 16, 17, 18, 18, 19, 19, 20, 20, 20)}


def group_sizes(num_cells: int, steps: int) -> list[int]:
    """Cells per step: the paper's schedule where one exists, else a linear ramp from 1 (each >= 1)."""
    if not 1 <= steps <= num_cells:
        raise ValueError(f"lpd steps must be in 1..{num_cells} (the grid's cell count), got {steps}")
    if (num_cells, steps) in PAPER_GROUPS:
        return list(PAPER_GROUPS[(num_cells, steps)])
    if steps == 1:
        return [num_cells]
    weights = range(1, steps)                                           # groups 2..steps ramp up
    ends = [round(c / sum(weights) * (num_cells - steps)) for c in itertools.accumulate(weights)]
    return [1] + [1 + e - before for e, before in zip(ends, [0] + ends[:-1])]


_NEIGHBOURS = [(dy, dx, 1.0 / (dy * dy + dx * dx) ** 0.5) for dy in (-1, 0, 1) for dx in (-1, 0, 1) if dy or dx]


def proximity(taken: torch.Tensor) -> torch.Tensor:
    """(H, W) bool generated cells -> (H, W) sum of 1/distance to generated 8-neighbours."""
    h, w = taken.shape
    pad = torch.nn.functional.pad(taken.double(), (1, 1, 1, 1))
    out = torch.zeros(h, w, dtype=torch.float64, device=taken.device)
    for dy, dx, inv in _NEIGHBOURS:
        out += inv * pad[1 + dy:1 + dy + h, 1 + dx:1 + dx + w]
    return out


@dataclass
class OrderDraws:
    """Row b's ORDER stream (suite.random_streams) read call after call: call k's n uniforms are
    draw k at positions 0..n-1."""
    streams: RowStreams
    b: int
    calls: int = 0

    @property
    def device(self) -> torch.device:
        return self.streams.keys.device

    def rand(self, n: int) -> torch.Tensor:
        self.calls += 1
        return self.streams.uniform(torch.arange(n, device=self.device)[None], ORDER, self.calls - 1, rows=[self.b])[0]


def _randperm(n: int, rng, device) -> torch.Tensor:
    if isinstance(rng, OrderDraws):
        return rng.rand(n).argsort(stable=True)
    return torch.randperm(n, generator=rng, device=device)


def _randint(n: int, rng, device) -> int:
    if isinstance(rng, OrderDraws):
        return min(int(rng.rand(1)[0] * n), n - 1)
    return int(torch.randint(n, (1,), generator=rng, device=device))


def lpd_order(height: int, width: int, sizes: list[int], generator: torch.Generator | OrderDraws | None = None,
              repulsion: int = 2, proximity_threshold: float = 1.0) -> list[list[int]]:
    """Groups of raster cell indices (one list per step) covering the grid once, computed once per
    request row on the generator's device (a CUDA generator draws CUDA numbers only); `generator`
    may be a row's stream (`OrderDraws`)."""
    if sum(sizes) != height * width:
        raise ValueError(f"group sizes sum to {sum(sizes)}, not the {height * width} cells of the grid")
    device = generator.device if generator is not None else torch.device("cpu")
    taken = torch.zeros(height, width, dtype=torch.bool, device=device)
    groups = []
    for size in sizes:
        free = (~taken).flatten().nonzero().flatten()                   # (F,) free cells
        perm = _randperm(len(free), generator, device)                  # random ties
        score = proximity(taken).flatten()[free[perm]]
        ranked = torch.sort(score, descending=True, stable=True)
        cells, scores = free[perm[ranked.indices]].tolist(), ranked.values.tolist()
        near = [c for c, s in zip(cells, scores) if s >= proximity_threshold]
        group: list[int] = []
        for c in near:
            if len(group) == size:
                break
            if all(_chebyshev(c, g, width) > repulsion for g in group):
                group.append(c)
        if len(group) < size:                                           # the rest: far from the group
            rest = [c for c in cells if c not in set(group)]
            group += _farthest(group, rest, size - len(group), width, generator)
        for c in group:
            taken[c // width, c % width] = True
        groups.append(group)
    return groups


def _chebyshev(a: int, b: int, width: int) -> int:
    return max(abs(a // width - b // width), abs(a % width - b % width))


def _farthest(chosen: list[int], candidates: list[int], k: int, width: int,
              generator: torch.Generator | OrderDraws | None) -> list[int]:
    """k cells of `candidates` by farthest-point sampling from `chosen` (Euclidean on the grid)."""
    if len(candidates) <= k:
        return list(candidates)
    device = generator.device if generator is not None else torch.device("cpu")
    cand = torch.tensor([[c // width, c % width] for c in candidates], dtype=torch.float64, device=device)   # (F, 2)
    picked: list[int] = []
    if chosen:
        ref = torch.tensor([[c // width, c % width] for c in chosen], dtype=torch.float64, device=device)
        dist = torch.cdist(cand, ref).min(1).values                                         # (F,)
    else:                                                    # nothing to be far from: a random start
        dist = torch.full((len(candidates),), -1.0, dtype=torch.float64, device=device)
        dist[_randint(len(candidates), generator, device)] = 1.0
        i = int(dist.argmax())
        picked.append(candidates[i])
        dist = torch.cdist(cand, cand[i:i + 1]).flatten()
        dist[i] = -1.0
        k -= 1
    for _ in range(k):
        i = int(dist.argmax())
        picked.append(candidates[i])
        dist = torch.minimum(dist, torch.cdist(cand, cand[i:i + 1]).flatten())
        dist[i] = -1.0
    return picked


@dataclass
class LPDPlan:
    """One batch row: its groups, how many are sampled, and the last group's cells (to feed)."""

    groups: list[list[int]]
    done_groups: int = 0
    to_feed: list[int] = dataclasses.field(default_factory=list)


@dataclass
class LPDRow:
    """What lpd keeps per batch row."""
    canvas: RasterCanvas       # the grid being filled
    plan: LPDPlan              # its groups and how far they are sampled


@dataclass
class LPDMeta:
    num_real: list[int]          # per batch row: real slots (prompt or previous group) first
    queries: list[list[int]]     # per batch row: cells queried this step, in slot order


@dataclass(frozen=True)
class LPD(DecoderBase):
    steps: int = 20
    repulsion: int = 2              # Chebyshev radius kept free around a group's cells
    proximity_threshold: float = 1.0
    grid: tuple[int, int] | None = None     # (H, W); None = read from the adapter's config.extra
    query_offset: int | None = None         # token id of the query for cell 0; None = from config.extra

    name: ClassVar[str] = "lpd"
    requires: ClassVar[frozenset] = frozenset({"custom_mask"})
    batch_independent: ClassVar[bool] = True   # each row's order and cells drawn from its own streams
    whole_prompt: ClassVar[bool] = True        # its first step feeds the whole prompt (no chunked prefill)

    def bind(self, model) -> "LPD":
        from ...models.adapters import as_adapter
        grid = self.grid if self.grid is not None else grid_of(model)
        offset = self.query_offset
        if offset is None:
            offset = as_adapter(model).config.extra.get("query_offset")
        if offset is None:
            raise ValueError("lpd needs a prior trained with position queries (config.extra has no "
                             "'query_offset'): train one with `python -m vision.train lpd`")
        return dataclasses.replace(self, grid=tuple(grid), query_offset=int(offset))

    grids = staticmethod(canvas_tokens)

    def start(self, state: DecodeState) -> None:
        if self.grid is None or self.query_offset is None:
            raise ValueError("lpd needs the grid and the query tokens: decode through suite.generate or call .bind(model)")
        h, w = self.grid
        if state.max_new_tokens != h * w:
            raise ValueError(f"lpd generates whole {h}x{w} grids: max_new_tokens must be {h * w}, "
                             f"got {state.max_new_tokens}")
        sizes = group_sizes(h * w, self.steps)
        state.rows = [LPDRow(RasterCanvas.empty(h, w, state.prompt_lengths[b]),
                             LPDPlan(lpd_order(h, w, sizes, OrderDraws(state.streams, b), self.repulsion,
                                               self.proximity_threshold)))
                      for b in range(state.batch)]

    def propose(self, state: DecodeState) -> Draft:
        rows, positions, masks, num_real, queries = [], [], [], [], []
        for b in range(state.batch):
            plan, canvas = state.rows[b].plan, state.rows[b].canvas
            if state.done[b]:
                for x in (rows, positions, queries):
                    x.append([])
                masks.append(None), num_real.append(0)
                continue
            if state.num_cached[b] == 0:                      # first step: the prompt, causal
                real_tok = state.tokens[b][:state.prompt_lengths[b]]
                real_pos = list(range(len(real_tok)))
                real_mask = torch.ones(len(real_tok), len(real_tok), dtype=torch.bool, device=state.device).tril()
            else:                                             # the previous group, seen as one block
                real_tok = [canvas.tokens[c] for c in plan.to_feed]
                real_pos = [canvas.position(c) for c in plan.to_feed]
                real_mask = torch.ones(len(real_tok), len(real_tok), dtype=torch.bool, device=state.device)
            cells = plan.groups[plan.done_groups]
            n_real, n_q = len(real_tok), len(cells)
            mask = torch.zeros(n_real + n_q, n_real + n_q, dtype=torch.bool, device=state.device)   # (N, N)
            mask[:n_real, :n_real] = real_mask
            mask[n_real:, :] = True                           # queries see the reals and each other
            rows.append(real_tok + [self.query_offset + c for c in cells])
            positions.append(real_pos + [canvas.position(c) for c in cells])
            masks.append(mask), num_real.append(n_real), queries.append(cells)
        live = [n for b, n in enumerate(num_real) if not state.done[b]]
        return Draft.from_rows(rows, positions, masks, meta=LPDMeta(num_real, queries), logits_from=min(live, default=0),
                               device=state.device)

    def accept(self, state: DecodeState, draft: Draft, logits) -> Acceptance:
        """Sample every live row's group in one batch (one host sync); real tokens stay, queries go."""
        meta: LPDMeta = draft.meta
        dev = draft.valid.device
        keep = torch.arange(draft.valid.shape[1], device=dev)[None] < torch.tensor(meta.num_real, device=dev)[:, None]
        live = [b for b in range(state.batch) if not state.done[b]]
        rows, slots, positions = [], [], []
        for b in live:
            canvas, cells = state.rows[b].canvas, meta.queries[b]
            start = meta.num_real[b] - draft.logits_from
            rows += [b] * len(cells)
            slots += range(start, start + len(cells))
            positions += [canvas.position(c) for c in cells]
        index = torch.tensor(rows, dtype=torch.long, device=dev), torch.tensor(slots, dtype=torch.long, device=dev)
        p = logits_to_probs(logits[index], state.params)                                 # (M, V)
        u = state.streams.uniform(positions, SAMPLE, rows=rows)
        tokens = iter(sample(p, u).tolist() if rows else [])                         # the step's one host sync
        for b in live:
            plan, canvas = state.rows[b].plan, state.rows[b].canvas
            for c in plan.to_feed:
                canvas.cached[c] = True
            for c in meta.queries[b]:
                canvas.put(c, next(tokens))
            plan.to_feed = list(meta.queries[b])
            plan.done_groups += 1
        return Acceptance(state.per_live_row(lambda b: state.rows[b].canvas.raster_prefix()), keep,
                          kept=list(meta.num_real))
