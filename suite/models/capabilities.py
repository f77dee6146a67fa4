"""What an adapter can do, declared in one typed place: the loop, the planner and the decoders read
`adapter.capabilities`, never probe an adapter for attributes. A decoder's `requires` names fields
of this class (`frozenset({"custom_mask"})`)."""
from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass(frozen=True)
class Capabilities:
    custom_mask: bool = False      # takes 4-D bool masks (tree drafts, lookahead branches, out-of-order slots)
    hidden_states: bool = False    # output_hidden=True also returns the last hidden states (B, N, D) (eagle)
    row_moves: bool = False        # holds nothing per row: rows may leave and join a batch (the scheduler)
    plain_mask: bool = False       # attention_mask=None means the model's own causal mask (suite.loop.plain_causal)
    cost_model: bool = False       # drafting decoders size their drafts by its measured cost(N) (suite.cost): it has
                                   # `device` and `cost_identity()` (what the curve depends on: its cache key)
    whole_prompt: bool = False     # a prompt is prefilled in one forward (a VLM reads its images with it)
    fills_cross: bool = False      # `fill_cross(cache)` computes a newcomer's cross-attention K/V (encoder-decoders)
    canvas: bool = False           # denoises a canvas (drafts carry suite.draft.Canvas): only `only_decoders` drive it
    only_decoders: tuple[str, ...] | None = None     # the decoders that run on it (None: any)
    step_width: int | None = None  # every decode step scores this many slots a row (suite.models.step); None: free
    prefill_width: int | None = None               # with step_width: a prompt is prefilled in chunks of this many
    row_widths: tuple[tuple[int, int], ...] | None = None   # ((at most rows, slots a row), ...): what a step of so
                                   # many rows gives a row (suite.models.step.width_at); None: as many as a draft takes

    def has(self, name: str) -> bool:
        """Whether the capability `name` (a decoder's `requires` entry) is declared."""
        if name not in _NAMES:
            raise ValueError(f"unknown adapter capability {name!r}; known: {', '.join(sorted(_NAMES))}")
        return bool(getattr(self, name))


_NAMES = {f.name for f in fields(Capabilities)} - {"only_decoders", "step_width", "prefill_width", "row_widths"}
