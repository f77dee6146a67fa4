"""Video rows with speculative Jacobi decoding inside each row and temporal drafts: the 3-D
schedule of `video_zipar` (frames pipelined as in diagonal decoding, Ye et al. 2025; rows inside
a frame as ZipAR, He et al. 2024) with SJD (Teng et al. 2024) along each active row, its drafts
taken from the previous frame (consecutive frames are alike).

Each active row (t, r) at column c scores up to `draft_len` guesses for cells c, c+1, ...: fresh
guesses copy the same cells of frame t-1 (the left neighbour in the first frame), later ones are
the redraws of the last verification (maximally coupled to the old guess when `coupled`, as in
MC-SJD). A row guesses only as far as frame t-1 has the window of every cell it predicts, so each
target p is the one `ar` computes. Guesses are verified with min(1, p/q), the first rejection
resampled from the residual.

Guarantee: with window=None (whole rows inside a frame) lossless in distribution and equal to
`ar` under greedy decoding; a window < W overlaps rows as ZipAR does (lossy).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from ...acceptance import accept_speculative
from ...loop import DecodeState
from ...sampling import sample
from ..chain.mc_sjd import coupled_redraws, raster_redraw_uniforms
from ..chain.sjd import draft_q
from .video_zipar import VideoZipAR
from .zipar import RasterCanvas, RowChain
from ..options import option


@dataclass(frozen=True)
class VideoZipARSJD(VideoZipAR):
    window: int | None = option(None, 1)    # None: whole rows inside a frame (exact)
    draft_len: int = 8            # guesses per active row and forward
    coupled: bool = True          # redraw unaccepted guesses coupled to the old ones (MC-SJD)

    name: ClassVar[str] = "video_zipar_sjd"

    def start(self, state: DecodeState) -> None:
        if self.draft_len < 0:
            raise ValueError(f"draft_len must be >= 0, got {self.draft_len}")
        super().start(state)

    def reach(self, canvas: RasterCanvas, row: int) -> int:
        """The last column of `row` whose target may be computed now: its window in frame t-1
        is there and (window < W) its lag behind the row above holds."""
        h, w = self.grid
        t, r = divmod(row, h)
        last = w - 1
        if r > 0 and self.window is not None and canvas.row_len[row - 1] < w:
            last = min(last, canvas.row_len[row - 1] - min(self.window, w))
        if t > 0 and self.radius is None:
            last = last if canvas.row_len[(t - 1) * h + h - 1] == w else -1
        elif t > 0:
            above = canvas.row_len[(t - 1) * h + min(r + self.radius, h - 1)]
            last = min(last, w - 1 if above == w else above - self.radius - 1)
        return last

    def guesses_for(self, state: DecodeState, b: int, canvas: RasterCanvas, row: int) -> list[int]:
        h, w = self.grid
        c = canvas.row_len[row]
        n = max(0, min(self.draft_len, self.reach(canvas, row) - c))     # guess i's slot predicts cell c+i+1
        store = state.rows[b].row_guesses
        guesses, q = store.get(row, ([], []))
        guesses, q = guesses[:n], q[:n]
        for i in range(len(guesses), n):
            fresh = self._fresh(canvas, row, c + i, guesses)
            if fresh is None:
                break
            guesses.append(fresh)
            q.append(None)
        store[row] = (guesses, q)
        return list(guesses)

    def _fresh(self, canvas: RasterCanvas, row: int, column: int, guesses: list[int]) -> int | None:
        """The same cell one frame back, else the row's latest token, else the cell above."""
        h, w = self.grid
        cell = row * w + column
        back = canvas.tokens[cell - h * w] if row >= h else -1
        left = guesses[-1] if guesses else canvas.tokens[cell - 1] if column > 0 else -1
        above = canvas.tokens[cell - w] if row > 0 else -1
        return next((t for t in (back, left, above) if t >= 0), None)

    def verifies(self, chain: RowChain) -> bool:
        return True                 # every chain verifies its guesses (none: a plain draw, in order)

    def accept_row(self, state: DecodeState, b: int, chain: RowChain, p: torch.Tensor) -> tuple[list[int], int]:
        store = state.rows[b].row_guesses
        guesses, q = store.get(chain.row, ([], []))
        start = state.rows[b].canvas.position(chain.cell)           # guess i decides position start + i
        v = accept_speculative(torch.tensor(guesses, dtype=torch.long, device=p.device),
                               draft_q(guesses, q, p.shape[-1], p.device),
                               p, state.streams.row_chain(b, start, len(guesses)))
        k = v.num_accepted
        later = p[k + 1:]                               # new targets of the cells after the committed token
        u = raster_redraw_uniforms(state, b, start + k + 1, len(later))
        redrawn = coupled_redraws(guesses[k + 1:], q[k + 1:], later, u) if self.coupled else \
            (sample(later, u[0]).tolist() if len(later) else [])
        store[chain.row] = (redrawn, list(later))
        return guesses[:k] + [v.next_token], k
