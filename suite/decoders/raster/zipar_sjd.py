"""ZipAR rows with speculative Jacobi decoding inside each row: a composition of ZipAR (He et al.
2024, next-set prediction across rows) and SJD (Teng et al. 2024, "Accelerating Auto-regressive
Text-to-Image Generation with Training-free Speculative Jacobi Decoding") within a row.

Rows start as in `zipar` (row r+1 once row r has `window` tokens) and keep its lag: a cell is
sampled only from a query that saw `window` cells above it (and right of it). Each active row
scores up to `draft_len` guesses for its next cells (fresh guesses copy the row's latest token, the
left neighbour, or in a row's first forward the cell above); they are verified with min(1, p/q),
the first rejection is resampled from the residual, and later guesses are redrawn from their new
p (maximally coupled to the old guess when `coupled`, as in MC-SJD).

A guess sees the earlier guesses of its own row and, with `cross_rows`, the guesses of the row
above that its lag needs: a row may guess as far as the row above's guesses reach, in the same
forward, instead of waiting a forward for them to be committed. A guess counts only if every
guess of the row above that it saw was accepted (the others are dropped before the check, and
only redrawn), so every sampled cell's query saw committed tokens alone.

Lossy like `zipar` (rows overlap); inside a row the verification is exact, so window = W gives
`ar`'s distribution (and its tokens under greedy decoding).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import torch

from ...acceptance import accept_speculative
from ...loop import Acceptance, DecodeState, Draft
from ...sampling import sample
from ..chain.mc_sjd import coupled_redraws, raster_redraw_uniforms
from ..chain.sjd import draft_q
from .zipar import RasterCanvas, RowChain, ZipAR, ZipARRow
from ..options import option


@dataclass
class ZipARSJDRow(ZipARRow):
    fed_upto: dict[int, int] = field(default_factory=dict)   # this forward: image row -> last column fed and kept


@dataclass(frozen=True)
class ZipARSJD(ZipAR):
    window: int = option(4, 1)
    draft_len: int = 4
    coupled: bool = True
    cross_rows: bool = True    # guesses may stand on the row above's guesses of the same forward

    name: ClassVar[str] = "zipar_sjd"
    row_type: ClassVar[type] = ZipARSJDRow

    def start(self, state: DecodeState) -> None:
        if self.draft_len < 0:
            raise ValueError(f"draft_len must be >= 0, got {self.draft_len}")
        super().start(state)

    def above_reach(self) -> int | None:
        # a guess in column c predicts c + 1, so it needs the row above up to column c + window
        # (an adaptive row's pending draft, in column 0, sees none: the row above has window + 1 cells)
        return self.grid[1] - min(self.window, self.grid[1]) if self.cross_rows else None

    def guesses_for(self, state: DecodeState, b: int, canvas: RasterCanvas, row: int) -> list[int]:
        store = state.rows[b].row_guesses
        room = canvas.width - canvas.row_len[row] - 1          # the bonus token stays inside the row
        if row > 0 and canvas.row_len[row - 1] < canvas.width:  # ZipAR's lag: cell c needs c + window cells above
            above = canvas.row_len[row - 1]                     # the row above was proposed just before this one
            if self.cross_rows:
                above += len(store.get(row - 1, ([], []))[0])
            room = min(room, above - min(self.window, canvas.width) - canvas.row_len[row])
        n = max(0, min(self.draft_len, room))
        guesses, q = store.get(row, ([], []))
        guesses, q = guesses[:n], q[:n]
        if len(guesses) < n and (row > 0 or canvas.row_len[row] > 0):
            cell = row * canvas.width + canvas.row_len[row]
            copy = canvas.tokens[cell - 1 if canvas.row_len[row] else cell - canvas.width]   # left, else above
            fresh = n - len(guesses)
            guesses, q = guesses + [copy] * fresh, q + [None] * fresh
        store[row] = (guesses, q)
        return list(guesses)

    def accept(self, state: DecodeState, draft: Draft, logits) -> Acceptance:
        for row in state.rows:
            row.fed_upto = {}
        return super().accept(state, draft, logits)

    def verifies(self, chain: RowChain) -> bool:
        return True                 # every chain verifies its guesses (none: a plain draw, in order)

    def accept_row(self, state: DecodeState, b: int, chain: RowChain, p: torch.Tensor) -> tuple[list[int], int]:
        store = state.rows[b].row_guesses
        guesses, q = store.get(chain.row, ([], []))
        width = state.rows[b].canvas.width
        column = chain.cell - chain.row * width
        valid = self._valid_slots(state, b, chain.row, column, len(guesses) + 1, width)
        start = state.rows[b].canvas.position(chain.cell)           # guess i decides position start + i
        v = accept_speculative(torch.tensor(guesses[:valid - 1], dtype=torch.long, device=p.device),
                               draft_q(guesses[:valid - 1], q[:valid - 1], p.shape[-1], p.device), p[:valid],
                               state.streams.row_chain(b, start, valid - 1))
        k = v.num_accepted
        state.rows[b].fed_upto[chain.row] = column + k - 1
        later = p[k + 1:]                               # new targets of the cells after the committed token
        u = raster_redraw_uniforms(state, b, start + k + 1, len(later))
        store[chain.row] = (self._redraw(guesses[k + 1:], q[k + 1:], later, u), list(later))
        return guesses[:k] + [v.next_token], k

    def _valid_slots(self, state: DecodeState, b: int, row: int, column: int, slots: int, width: int) -> int:
        """How many of a row's slots (its source, then its guesses) saw only accepted guesses of the
        row above: slot i sits in column `column` - 1 + i and saw the row above up to column
        `column` - 1 + i + window. The row above was accepted just before (or was complete)."""
        upto = state.rows[b].fed_upto.get(row - 1)
        if upto is None:
            return slots
        return min(slots, max(1, upto - min(self.window, width) - column + 2))

    def _redraw(self, old: list[int], old_q: list, p: torch.Tensor, u: torch.Tensor) -> list[int]:
        if not self.coupled:
            return sample(p, u[0]).tolist() if len(p) else []
        return coupled_redraws(old, old_q, p, u)
