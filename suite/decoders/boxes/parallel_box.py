"""Parallel Box Decoding: a whole box block in one forward (LocateAnything, NVIDIA 2026,
arXiv 2605.27365, "Fast" mode).

A grounding model emits boxes as fixed blocks of B slots (e.g. OBJ x0 y0 x1 y1 END). The block
after the last committed token is scored in one forward with the block-diffusion layout
(`block_diffusion.block_draft`): its head comes from the last clean slot (the exact AR
distribution), its B-1 later slots are MASK slots that see the committed past and each other
(the model was trained so: later slots masked, bidirectional inside a block, causal across
blocks). The whole block is committed; it becomes clean causal context (exact K/V) in the next
forward, fused with the next block's scoring. A head that ends the answer (an EOS token such as
"no match") is committed alone.

Lossy relative to `ar`: the later slots are predicted without seeing each other's values, so
their joint can differ from AR's (e.g. x0 from one object, x1 from another when two match). With
`ordered` (the default), an x0 y0 x1 y1 block whose x1 <= x0 (or y1 <= y0) gets that far corner
chosen again among the values past the near one (`ordered_corners`), so it still names a box. The
benchmark measures the cost (Acc@0.5 vs `ar`); `hybrid` (hybrid_box.py) validates and falls back.
Forwards: one per block (+ one for the end token when it is not the head of a scored block),
against B per block for `ar`. The block layout comes from the adapter config (`bind`).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from ..base import DecoderBase
from ...loop import Acceptance, DecodeState, Draft
from ...models.adapters import as_adapter
from ...sampling import draw
from ..blocks.block_diffusion import block_draft, clean_acceptance, row_logits, slot_uniforms


@dataclass(frozen=True)
class BoxLayout:
    """What a box block looks like: B slots, head and end structure tokens, coordinate tokens
    coord_lo..coord_hi (grid values 0..coord_hi-coord_lo), and the meaning of the value slots:
    "xyxy" (x0 y0 x1 y1) or "cxcywh_cs" (cx cy w h, cos 2θ and sin 2θ mapped to the grid)."""

    block_size: int
    mask_token_id: int
    head_id: int
    end_id: int
    coord_lo: int
    coord_hi: int
    box_format: str = "xyxy"

    @staticmethod
    def of(adapter) -> "BoxLayout":
        extra = as_adapter(adapter).config.extra or {}
        need = ("block_size", "mask_token_id", "block_head_id", "block_end_id", "coord_lo", "coord_hi")
        missing = [k for k in need if k not in extra]
        if missing:
            raise ValueError(f"box decoders need a grounding model adapter whose config.extra has {', '.join(missing)} "
                             "(e.g. vision.load_grounding_pipeline()); use decoder='ar' for other models")
        return BoxLayout(extra["block_size"], extra["mask_token_id"], extra["block_head_id"], extra["block_end_id"],
                         extra["coord_lo"], extra["coord_hi"], extra.get("box_format", "xyxy"))


def slot_confidence(logits: torch.Tensor, tokens: list[int], layout: BoxLayout, tolerance: int) -> list[float]:
    """(K, V) logits, K chosen tokens -> K confidences: the softmax mass within `tolerance` grid
    values of a chosen coordinate (a spread over neighbours is not doubt), the plain probability
    of any other chosen token."""
    probs = torch.softmax(logits.float(), -1)
    lo, hi = layout.coord_lo, layout.coord_hi
    return [float(probs[i, max(lo, t - tolerance):min(hi, t + tolerance) + 1].sum() if lo <= t <= hi else probs[i, t])
            for i, t in enumerate(tokens)]


def block_problem(tokens: list[int], conf: list[float] | None, layout: BoxLayout, floor: float) -> str | None:
    """Why a parallel block cannot be trusted, or None: structure tokens in place, values are
    coordinates, x0 < x1 and y0 < y1 (w, h > 0 and a unit angle vector for oriented boxes), the
    box inside the image, every slot's confidence at least `floor` (conf None: not checked)."""
    B = layout.block_size
    if len(tokens) != B or tokens[0] != layout.head_id or tokens[-1] != layout.end_id:
        return "structure"
    vals = [t - layout.coord_lo for t in tokens[1:-1]]
    g = layout.coord_hi - layout.coord_lo
    if any(v < 0 or v > g for v in vals):
        return "structure"
    if layout.box_format == "xyxy":
        x0, y0, x1, y1 = vals
        if not (x0 < x1 and y0 < y1):
            return "geometry"
    else:
        cx, cy, w, h, c2, s2 = (v / g for v in vals)
        if w <= 0 or h <= 0 or abs(math.hypot(2 * c2 - 1, 2 * s2 - 1) - 1) > 0.3:
            return "geometry"
        reach = (w + h) / 2                    # a loose bound on the half-diagonal of the rotated box
        if cx - reach < -0.05 or cx + reach > 1.05 or cy - reach < -0.05 or cy + reach > 1.05:
            return "outside"
    if conf is not None and min(conf) < floor:
        return "confidence"
    return None


def box_proposal(state: DecodeState, layout: BoxLayout) -> Draft:
    """Pending tokens, then B-1 MASK slots per live row (fewer where the row's room ends first)."""
    noisy = []
    for b in range(state.batch):
        n = 0 if state.done[b] else max(0, min(layout.block_size - 1, state.room(b) - 1))
        noisy.append([layout.mask_token_id] * n)
    return block_draft(state, [[] for _ in range(state.batch)], noisy)


def ordered_corners(row: torch.Tensor, tokens: torch.Tensor, layout: BoxLayout, state: DecodeState, b: int) -> torch.Tensor:
    """An x0 y0 x1 y1 block whose far corner is not past its near one (x1 <= x0 or y1 <= y0, the
    parallel slots having picked values from different objects or none) gets that slot chosen
    again among the values past the near corner: the most probable valid box, instead of a box
    the pipeline would drop. row (B, V) logits and tokens (B,) of one full block of row b."""
    tokens = tokens.clone()
    for near, far in ((1, 3), (2, 4)):
        lo, hi = int(tokens[near]), int(tokens[far])
        if not (layout.coord_lo <= lo < layout.coord_hi and layout.coord_lo <= hi <= layout.coord_hi) or hi > lo:
            continue
        logits = row[far].clone()
        logits[:lo + 1] = float("-inf")
        logits[layout.coord_hi + 1:] = float("-inf")
        u = slot_uniforms(state, b, len(state.tokens[b]) + far, 1, draw=1)     # the slot's second draw
        tokens[far] = draw(logits, state.params, u[0])
    return tokens


@dataclass(frozen=True)
class ParallelBox(DecoderBase):
    layout: Any = None          # BoxLayout; default: from the adapter config (bind)
    ordered: bool = True        # xyxy blocks: re-choose a far corner that is not past the near one

    name: ClassVar[str] = "parallel_box"
    requires: ClassVar[frozenset] = frozenset({"custom_mask"})

    def bind(self, adapter) -> "ParallelBox":
        return self if self.layout is not None else dataclasses.replace(self, layout=BoxLayout.of(adapter))

    def start(self, state: DecodeState) -> None:
        if self.layout is None:
            raise ValueError("parallel_box needs a box layout: bind it to a grounding adapter (decoder.bind(adapter))")

    def propose(self, state: DecodeState) -> Draft:
        return box_proposal(state, self.layout)

    def accept(self, state: DecodeState, draft: Draft, logits) -> Acceptance:
        def block(b: int) -> list[int]:
            row = row_logits(draft, logits, b)
            tokens = draw(row, state.params, slot_uniforms(state, b, len(state.tokens[b]), row.shape[0]))   # (1 + noisy,)
            head = int(tokens[0])
            if head in state.eos_token_ids or tokens.shape[0] == 1:
                return [head]
            state.stats.count("box_blocks")
            if self.ordered and self.layout.box_format == "xyxy" and tokens.shape[0] == self.layout.block_size:
                tokens = ordered_corners(row, tokens, self.layout, state, b)
            return tokens.tolist()
        return clean_acceptance(draft, state.per_live_row(block), [0] * state.batch)
