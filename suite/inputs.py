"""Typed inputs of a request, beyond its prompt: what a pipeline hands a decoder through
`suite.prepare(..., inputs=RequestInputs(...))`. Decoders read `state.inputs`; they keep their own
bookkeeping in `state.rows` (one of their Row dataclass per row)."""
from __future__ import annotations

from dataclasses import dataclass, fields, replace

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
    constraints: tuple | None = None     # per row, a suite.constraint.RowConstraint (None: a free row); the loop
                                         # masks every decoder's logits with it (structured output)

    def given(self) -> dict[str, tuple]:
        """{input name: its per-row values} of the inputs this request has (the others are None)."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        return {name: v for name, v in values.items() if v is not None}

    def rows(self, field: str, batch: int, decoder: str, how: str):
        """The per-row values of one input, checked against the batch; a clear error naming `how`."""
        values = self.given().get(field)
        if values is None:
            raise ValueError(f"{decoder} needs inputs.{field} (one per row): {how}")
        if len(values) != batch:
            raise ValueError(f"inputs.{field} has {len(values)} rows for a batch of {batch}")
        return values

    def select(self, index: list[int]) -> "RequestInputs":
        """These inputs for rows `index` only (a running batch's rows leaving)."""
        return replace(self, **{name: tuple(values[b] for b in index) for name, values in self.given().items()})

    def extend(self, other: "RequestInputs", mine: int, theirs: int) -> "RequestInputs":
        """These inputs (`mine` rows) followed by `other`'s (`theirs` rows); a side without an input
        contributes None for each of its rows."""
        a, b = self.given(), other.given()
        return replace(self, **{name: tuple(a.get(name) or (None,) * mine) + tuple(b.get(name) or (None,) * theirs)
                                for name in {**a, **b}})

