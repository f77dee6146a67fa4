"""ZipAR rows with speculative Jacobi decoding inside each row: a composition of ZipAR (He et al.
2024, next-set prediction across rows) and SJD (Teng et al. 2024, "Accelerating Auto-regressive
Text-to-Image Generation with Training-free Speculative Jacobi Decoding") within a row.

Rows start as in `zipar` (row r+1 once row r has `window` tokens) and keep its lag: a row's
guesses never reach a cell whose `window` cells above are not generated yet. Each active row
scores up to `draft_len` guesses for its next cells (fresh guesses copy the row's latest token, the left
neighbour); they are verified with min(1, p/q), the first rejection is resampled from the
residual, and later guesses are redrawn from their new p (maximally coupled to the old guess
when `coupled`, as in MC-SJD). Guesses are seen only by later guesses of their own row.

Lossy like `zipar` (rows overlap); inside a row the verification is exact, so window = W gives
`ar`'s distribution (and its tokens under greedy decoding).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from ..acceptance import accept_speculative
from ..loop import DecodeState
from ..sampling import sample
from .mc_sjd import coupled_redraws
from .sjd import draft_q
from .zipar import RasterCanvas, RowChain, ZipAR


@dataclass(frozen=True)
class ZipARSJD(ZipAR):
    window: int = 4
    draft_len: int = 4
    coupled: bool = True

    name: ClassVar[str] = "zipar_sjd"

    def start(self, state: DecodeState) -> None:
        if self.draft_len < 0:
            raise ValueError(f"draft_len must be >= 0, got {self.draft_len}")
        super().start(state)

    def guesses_for(self, state: DecodeState, b: int, canvas: RasterCanvas, row: int) -> list[int]:
        room = canvas.width - canvas.row_len[row] - 1          # the bonus token stays inside the row
        if row > 0 and canvas.row_len[row - 1] < canvas.width:  # ZipAR's lag: cell c needs c + window cells above
            room = min(room, canvas.row_len[row - 1] - min(self.window, canvas.width) - canvas.row_len[row])
        n = max(0, min(self.draft_len, room))
        store = state.scratch["row_guesses"][b]
        guesses, q = store.get(row, ([], []))
        guesses, q = guesses[:n], q[:n]
        if len(guesses) < n and canvas.row_len[row] > 0:
            left = canvas.tokens[row * canvas.width + canvas.row_len[row] - 1]
            fresh = n - len(guesses)
            guesses, q = guesses + [left] * fresh, q + [None] * fresh
        store[row] = (guesses, q)
        return list(guesses)

    def accept_row(self, state: DecodeState, b: int, chain: RowChain, p: torch.Tensor) -> tuple[list[int], int]:
        store = state.scratch["row_guesses"][b]
        guesses, q = store.get(chain.row, ([], []))
        v = accept_speculative(torch.tensor(guesses, dtype=torch.long), draft_q(guesses, q, p.shape[-1]),
                               p, state.generator)
        k = v.num_accepted
        later = p[k + 1:]                               # new targets of the cells after the committed token
        store[chain.row] = (self._redraw(guesses[k + 1:], q[k + 1:], later, state), list(later))
        return guesses[:k] + [v.next_token], k

    def _redraw(self, old: list[int], old_q: list, p: torch.Tensor, state: DecodeState) -> list[int]:
        if not self.coupled:
            return sample(p, state.generator).tolist() if len(p) else []
        return coupled_redraws(old, old_q, p, state.generator)
