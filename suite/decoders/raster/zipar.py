"""ZipAR (He et al. 2024, "ZipAR: Parallel Autoregressive Image Generation through Spatial
Locality"): next-set prediction over an H x W raster of image tokens.

Row r+1 starts once row r has `window` tokens; every forward then samples one token for each
active row. Inputs carry their true raster positions, and each query sees exactly the generated
tokens that precede it in raster order (a 4-D mask over cache and draft), never a later row.
The query that starts row r+1 sits at the slot of (r, W-1), which is not generated yet: as in the
released LlamaGen code it holds a placeholder (the latest token of row r) whose K/V is dropped.

Adaptive window (`adaptive=True`, the paper's v3 scheme with a rejection test analogous to
speculative decoding): row r+1 becomes pending once row r has `window` tokens. Each forward draws
a draft of its first token from q (the current context) and the next forward checks that draft
against p, the prediction with one more token of row r: accepted with min(1, p/q), the row starts
(the draft is its first token); rejected, a new draft is drawn from p. A row starts after at most
`max_window` tokens above (default W). So rows start early where the row above no longer moves
their first token, at a chance of 1 - TV(p, q) per check.

Lossy: tokens of row r+1 are sampled before the end of row r exists, so the joint law differs
from `ar` (window = W makes it exactly `ar`). The grid (H, W) comes from the adapter's
`config.extra["grid"]`, after a prompt (the class-token prefix) of any length.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import ClassVar

import torch

from ...acceptance import accept_speculative
from ...loop import Acceptance, DecodeState, Draft
from ...random_streams import ACCEPT, DRAFT, SAMPLE
from ...sampling import logits_to_probs, sample
from ..base import DecoderBase
from ..options import option

REAL, PLACEHOLDER = -1, -2     # slot kinds; a kind >= 0 is a draft guess of that image row


def canvas_tokens(state: DecodeState) -> list[list[int]]:
    """Each row's grid in raster order (-1 where not decided yet), for decoders that fill the grid
    out of order (zipar, zipar_sjd, lpd)."""
    return [list(row.canvas.tokens) for row in state.rows]


def grid_of(model) -> tuple[int, int]:
    """(H, W) from an adapter's config.extra; a clear error for models without one."""
    from ...models.adapters import as_adapter
    grid = as_adapter(model).config.extra.get("grid")
    if grid is None or len(grid) != 2:
        raise ValueError("this decoder generates image grids: pass an adapter whose config.extra has "
                         "'grid': (H, W) (e.g. vision.load_image_pipeline().prior), or set grid=(H, W)")
    return int(grid[0]), int(grid[1])


@dataclass
class RasterCanvas:
    """One batch row's image being filled: tokens (H*W,) with -1 where not generated, per-row
    counts, which cells have K/V in the cache, and how many are committed in raster order."""

    height: int
    width: int
    prompt: int                      # logical position of raster cell 0
    tokens: list[int]
    row_len: list[int]
    cached: list[bool]
    committed: int = 0

    @classmethod
    def empty(cls, height: int, width: int, prompt: int) -> "RasterCanvas":
        return cls(height, width, prompt, [-1] * (height * width), [0] * height, [False] * (height * width))

    def position(self, cell: int) -> int:
        return self.prompt + cell

    def put(self, cell: int, token: int) -> None:
        self.tokens[cell] = token
        self.row_len[cell // self.width] += 1

    def raster_prefix(self) -> list[int]:
        """The newly complete raster prefix (committed to the decode state in order)."""
        start = self.committed
        while self.committed < len(self.tokens) and self.tokens[self.committed] >= 0:
            self.committed += 1
        return self.tokens[start:self.committed]


def active_rows(canvas: RasterCanvas, window: int) -> list[int]:
    """Rows that get tokens this step: row 0, and row r+1 once row r has `window` tokens."""
    rows = []
    for r in range(canvas.height):
        if r > 0 and canvas.row_len[r - 1] < min(window, canvas.width):
            break
        if canvas.row_len[r] < canvas.width:
            rows.append(r)
    return rows


@dataclass
class ZipARRow:
    """What zipar (and the raster decoders built on it) keeps per batch row."""
    canvas: RasterCanvas       # the grid being filled
    # image row -> (guesses, the q each came from, None for a copied guess): an adaptive row's
    # first-token draft, or the next guesses of zipar_sjd / video_zipar_sjd
    row_guesses: dict[int, tuple[list[int], list]] = field(default_factory=dict)


@dataclass
class RowChain:
    """One active image row in one forward: the slot that predicts its next cell, then guesses."""

    row: int
    cell: int                 # next cell of the row
    source: int               # draft slot whose output predicts `cell`
    guess_slots: list[int]
    guesses: list[int]
    pending: bool = False     # adaptive window: the row has not started; `guesses` is its first-token draft


@dataclass
class ZipMeta:
    chains: list[list[RowChain]]   # per batch row
    kept: list[list[int]]          # per batch row: cells fed as real inputs (their K/V stays)
    num_prompt: list[int]          # per batch row: prompt slots fed in this forward


def slot_mask(slots: list[tuple[int, int, int]], above_reach: int | None = None, *,
              device: torch.device) -> torch.Tensor:
    """(N, N) visibility among one batch row's slots (token, position, kind): a slot sees itself,
    real inputs at earlier positions, and earlier guesses of its own image row; placeholders are
    never seen. With `above_reach` (zipar_sjd's cross-row guesses) a guess also sees the guesses of
    the row directly above at positions at least `above_reach` before its own."""
    pos = torch.tensor([p for _, p, _ in slots], dtype=torch.long, device=device)
    kind = torch.tensor([k for _, _, k in slots], dtype=torch.long, device=device)
    earlier = pos[None, :] < pos[:, None]
    seen = (kind[None, :] == REAL) | ((kind[None, :] >= 0) & (kind[None, :] == kind[:, None]))
    if above_reach is not None:
        seen |= ((kind[:, None] >= 1) & (kind[None, :] == kind[:, None] - 1)
                 & (pos[None, :] <= pos[:, None] - above_reach))
    return (earlier & seen) | torch.eye(len(slots), dtype=torch.bool, device=device)


@dataclass(frozen=True)
class ZipAR(DecoderBase):
    window: int = option(4, 1)
    grid: tuple[int, int] | None = None    # (H, W); None = read from the adapter's config.extra
    adaptive: bool = False                 # rows start once their first token passes a rejection test
    max_window: int | None = None          # adaptive: a row starts at the latest after this many above (None = W)

    name: ClassVar[str] = "zipar"
    requires: ClassVar[frozenset] = frozenset({"custom_mask"})
    row_type: ClassVar[type] = ZipARRow    # the per-row state `start` makes (subclasses extend it)
    batch_independent: ClassVar[bool] = True   # rows draw from their own streams, start rows by their own canvas
    whole_prompt: ClassVar[bool] = True        # its first step feeds the whole prompt (no chunked prefill)

    def bind(self, model) -> "ZipAR":
        return self if self.grid is not None else dataclasses.replace(self, grid=grid_of(model))

    grids = staticmethod(canvas_tokens)

    def start(self, state: DecodeState) -> None:
        if self.grid is None:
            raise ValueError(f"{self.name} needs the image grid: decode through suite.generate or call .bind(model)")
        if self.window < 1:
            raise ValueError(f"{self.name} window must be >= 1, got {self.window}")
        if self.max_window is not None and self.max_window < self.window:
            raise ValueError(f"{self.name} max_window must be >= window ({self.window}), got {self.max_window}")
        h, w = self.grid
        if state.max_new_tokens != h * w:
            raise ValueError(f"{self.name} generates whole {h}x{w} grids: max_new_tokens must be {h * w}, "
                             f"got {state.max_new_tokens}")
        state.rows = [self.row_type(RasterCanvas.empty(h, w, state.prompt_lengths[b])) for b in range(state.batch)]

    def pending(self, canvas: RasterCanvas, row: int) -> bool:
        """Adaptive window: an active row that has not started and may still wait."""
        longest = min(self.max_window or canvas.width, canvas.width)
        return self.adaptive and row > 0 and canvas.row_len[row] == 0 and canvas.row_len[row - 1] < longest

    # ---- propose

    def active_rows(self, canvas: RasterCanvas) -> list[int]:
        """Rows that get a token this step (subclasses add conditions, e.g. video frames)."""
        return active_rows(canvas, self.window)

    def above_reach(self) -> int | None:
        """How far back a guess sees the guesses of the row above (None: it sees none of them)."""
        return None

    def guesses_for(self, state: DecodeState, b: int, canvas: RasterCanvas, row: int) -> list[int]:
        """Draft tokens after the row's next cell (none in plain ZipAR)."""
        return []

    def propose(self, state: DecodeState) -> Draft:
        rows, positions, masks, chains, kept, num_prompt = [], [], [], [], [], []
        for b in range(state.batch):
            slots, row_chains, row_kept, n_prompt = self._row_slots(state, b)
            rows.append([t for t, _, _ in slots]), positions.append([p for _, p, _ in slots])
            masks.append(slot_mask(slots, self.above_reach(), device=state.device) if slots else None)
            chains.append(row_chains), kept.append(row_kept), num_prompt.append(n_prompt)
        draft = Draft.from_rows(rows, positions, masks, meta=ZipMeta(chains, kept, num_prompt), device=state.device)
        # (B, N, S): a slot sees cached tokens at raster-earlier positions only
        draft.past_mask = state.cache.positions[:, None, :] < draft.positions[:, :, None]
        return draft

    def _row_slots(self, state: DecodeState, b: int):
        """Batch row b: uncached prompt and generated cells (real inputs, kept), then per active
        image row a placeholder if its predicting cell is no input this step, then its guesses."""
        if state.done[b]:
            return [], [], [], 0
        canvas = state.rows[b].canvas
        prompt = state.tokens[b][:state.prompt_lengths[b]]
        slots = [(t, i, REAL) for i, t in enumerate(prompt)] if state.num_cached[b] == 0 else []
        n_prompt = len(slots)
        kept = [cell for cell, tok in enumerate(canvas.tokens) if tok >= 0 and not canvas.cached[cell]]
        slots += [(canvas.tokens[cell], canvas.position(cell), REAL) for cell in kept]
        index = {p: i for i, (_, p, _) in enumerate(slots)}
        chains = []
        for r in self.active_rows(canvas):
            cell = r * canvas.width + canvas.row_len[r]
            source = canvas.position(cell) - 1
            if source not in index:
                slots.append((self._placeholder(canvas, prompt, cell), source, PLACEHOLDER))
                index[source] = len(slots) - 1
            pending = self.pending(canvas, r)
            if pending:
                guesses = state.rows[b].row_guesses.get(r, ([], []))[0]
            else:
                guesses = self.guesses_for(state, b, canvas, r)
            guess_slots = list(range(len(slots), len(slots) + len(guesses)))
            slots += [(g, canvas.position(cell + i), r) for i, g in enumerate(guesses)]
            chains.append(RowChain(r, cell, index[source], guess_slots, guesses, pending))
        return slots, chains, kept, n_prompt

    @staticmethod
    def _placeholder(canvas: RasterCanvas, prompt: list[int], cell: int) -> int:
        """The latest generated token before `cell` in raster order (or the last prompt token)."""
        before = [t for t in canvas.tokens[:cell] if t >= 0]
        return before[-1] if before else prompt[-1]

    # ---- accept

    def verifies(self, chain: RowChain) -> bool:
        """Whether the chain's cells come from `accept_row`/`start_row` (a verification, one chain
        at a time) rather than one plain draw taken with every other row's in one batch."""
        return chain.pending

    def accept_row(self, state: DecodeState, b: int, chain: RowChain, p: torch.Tensor) -> tuple[list[int], int]:
        """Tokens for the chain's cells from p (G+1, V), and how many guesses were accepted (a
        decoder whose chains `verifies` overrides it)."""
        raise NotImplementedError(f"{self.name} samples its rows' next cells in one batch (`draw_heads`)")

    def start_row(self, state: DecodeState, b: int, chain: RowChain, p: torch.Tensor) -> tuple[list[int], int]:
        """A pending row: check last step's first-token draft against p[0] (the prediction with
        more of the row above); accepted, the row starts with it and samples its second token
        from p[1]; otherwise (or with no draft yet) a new draft is drawn from p[0]."""
        store, canvas = state.rows[b].row_guesses, state.rows[b].canvas
        position, filled = canvas.position(chain.cell), sum(canvas.row_len)   # a rejected draft is redrawn: key by
        if chain.guesses:                                                      # the filled cells too (new each step)
            (x,), (q,) = store.pop(chain.row)
            u = state.streams.row(b, position, ACCEPT, 1, filled), state.streams.row(b, position + 1, SAMPLE, 1)[0]
            verdict = accept_speculative(torch.tensor([x], device=p.device), q[None], p, u)
            if verdict.num_accepted:                   # its bonus token is the row's second
                return [x, verdict.next_token], 1
        store[chain.row] = ([int(sample(p[0], state.streams.row(b, position, DRAFT, 1, filled)))], [p[0]])
        return [], 0

    def draw_heads(self, state: DecodeState, logits: torch.Tensor, heads: list[tuple[int, RowChain]]) -> list[int]:
        """The next cell of every (batch row, chain) in `heads`, one draw each from its source
        slot, all in one batch: host ints, the step's one host sync."""
        if not heads:
            return []
        dev = logits.device
        rows = torch.tensor([b for b, _ in heads], dtype=torch.long, device=dev)
        sources = torch.tensor([chain.source for _, chain in heads], dtype=torch.long, device=dev)
        p = logits_to_probs(logits[rows, sources], state.params)                          # (M, V)
        positions = [state.rows[b].canvas.position(chain.cell) for b, chain in heads]
        u = state.streams.uniform(positions, SAMPLE, rows=[b for b, _ in heads])       # (M,)
        return sample(p, u).tolist()

    def accept(self, state: DecodeState, draft: Draft, logits) -> Acceptance:
        meta: ZipMeta = draft.meta
        reals = [n + len(k) for n, k in zip(meta.num_prompt, meta.kept)]
        real = torch.tensor(reals, device=draft.valid.device)
        keep = torch.arange(draft.valid.shape[1], device=real.device)[None] < real[:, None]   # real inputs stay
        guessed = False                                 # accepted guesses keep slots past the real ones
        live = [b for b in range(state.batch) if not state.done[b]]
        for b in live:
            for cell in meta.kept[b]:
                state.rows[b].canvas.cached[cell] = True
        heads = [(b, chain) for b in live for chain in meta.chains[b] if not self.verifies(chain)]
        for (b, chain), tok in zip(heads, self.draw_heads(state, logits, heads)):
            state.rows[b].canvas.put(chain.cell, tok)
        for b in live:                                  # verifications, row by row in chain order
            canvas = state.rows[b].canvas
            for chain in meta.chains[b]:
                if not self.verifies(chain):
                    continue
                p = logits_to_probs(logits[b, [chain.source] + chain.guess_slots], state.params)   # (G+1, V)
                tokens, accepted = (self.start_row if chain.pending else self.accept_row)(state, b, chain, p)
                for i, tok in enumerate(tokens):
                    canvas.put(chain.cell + i, tok)
                for i in range(accepted):              # accepted guesses keep their K/V
                    keep[b, chain.guess_slots[i]] = True
                    canvas.cached[chain.cell + i] = True
                guessed = guessed or accepted > 0
        return Acceptance(state.per_live_row(lambda b: state.rows[b].canvas.raster_prefix()), keep,
                          kept=None if guessed else reals)
