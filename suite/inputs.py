"""Typed inputs of a request, beyond its prompt: what a pipeline hands a decoder through
`suite.prepare(..., inputs=RequestInputs(...))`. Decoders read `state.inputs`; they keep their own
bookkeeping in `state.rows` (one of their Row dataclass per row)."""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class CTCHypothesis:
    """One row's CTC best path and the entropy (nats) of each of its frames (F,)."""
    tokens: list[int]
    frame_entropy: torch.Tensor


@dataclass(frozen=True)
class RequestInputs:
    ctc: tuple[CTCHypothesis, ...] | None = None             # per row (ctc_speculative)
    prior_tokens: tuple[list[int], ...] | None = None        # per row, a previous version of the output (ngram_prior)

    def rows(self, field: str, batch: int, decoder: str, how: str):
        """The per-row values of one input, checked against the batch; a clear error naming `how`."""
        values = getattr(self, field)
        if values is None:
            raise ValueError(f"{decoder} needs inputs.{field} (one per row): {how}")
        if len(values) != batch:
            raise ValueError(f"inputs.{field} has {len(values)} rows for a batch of {batch}")
        return values
