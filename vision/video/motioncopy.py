"""A motion-told copy path for the video prior: the model is given the motion's offset, not left
to learn it.

For a slot that predicts cell (t, r, c), t >= 1, under the clip's motion m (the prompt's motion
token; the null motion of classifier-free guidance is a motion of its own), the copy distribution
reads frame t-1 around the cell (the window's neighbourhood, prevframe.Neighbourhood):
- a told motion (the moves: a shape moved by exactly one code cell a frame) reads the one cell its
  offset names: "right" reads (r, c-1);
- any other motion (rotate, grow, null) spreads over the (2r+1)^2 offsets by a learnt softmax
  whose logits are a per-motion table plus o^T D_m p, o the offset and p the cell's place around
  the frame's centre: one 2x2 map per motion makes "copy from further in" (grow) or "from the
  side the turn comes from" (rotate) a position-dependent choice.
The model's own distribution and the copy are mixed in probability space by a gate read from the
slot's last hidden state, g = sigmoid(w . h + b_m):
    p = (1 - g * mass) p_model + g * sum_o pi_o [code at o],
mass being the weight of the offsets that exist (frame 0, off-grid cells, a frame's last cell:
none). The output is log p, finite everywhere (a logits vector: temperature, top-k and guidance
apply as to any). The condition still enters the sequence as the prompt, and the copy reads only
cells the window shows, so the decoders' contract (diagonal exact) holds.

Installed as `model.model.motion_copy` when video_prior.json has "copy": {"scheme": "motion_copy",
...}; its weights are saved with the model's.
"""
from __future__ import annotations

import torch
from torch import nn

from .prevframe import Neighbourhood

SCHEME = "motion_copy"
FLOOR = -1e4              # log "no copy mass" (finite: guidance subtracts logits)


class MotionCopy(Neighbourhood):
    """Per motion (M named + null): a told offset or learnt offset logits and position map, and a
    gate bias; one gate direction over the hidden state. `told`: (M + 1) (dr, dc) or None."""

    def __init__(self, codebook: int, hidden: int, height: int, width: int, radius: int, prompt: int,
                 told: list, gate_bias: float = 0.0):
        super().__init__(codebook, height, width, radius, prompt)
        m, o = len(told), self.offsets
        table = torch.zeros(m, o)
        for i, off in enumerate(told):
            if off is not None:
                if max(abs(off[0]), abs(off[1])) > radius:
                    raise ValueError(f"told offset {off} lies outside the window's radius {radius}")
                table[i, (off[0] + radius) * (2 * radius + 1) + off[1] + radius] = 1.0
        self.register_buffer("told", table, persistent=False)
        self.register_buffer("is_told", torch.tensor([off is not None for off in told]), persistent=False)
        self.offset_logits = nn.Parameter(torch.zeros(m, o))
        self.drift = nn.Parameter(torch.zeros(m, 2, 2))
        self.gate = nn.Parameter(torch.zeros(hidden))
        self.gate_bias = nn.Parameter(torch.full((m,), float(gate_bias)))

    def weights(self, positions: torch.Tensor, motion: torch.Tensor) -> torch.Tensor:
        """(B, N) slot positions, (B,) motion indices -> (B, N, O) copy weights per offset (zero
        where no cell exists)."""
        cells = self.height * self.width
        cell = (positions + 1 - self.prompt) % cells
        place = torch.stack([cell.div(self.width, rounding_mode="floor") - (self.height - 1) / 2,
                             cell % self.width - (self.width - 1) / 2], -1) / (max(self.height, self.width) / 2)
        off = torch.stack([self.dr, self.dc], -1).to(place.dtype)                     # (O, 2)
        learnt = self.offset_logits[motion].float()[:, None] + torch.einsum("bni,bij,oj->bno", place,
                                                                             self.drift[motion].float(), off)
        pi = torch.where(self.is_told[motion][:, None, None], self.told[motion].float()[:, None], learnt.softmax(-1))
        return pi * self.neighbours(positions)[1]

    def forward(self, logits: torch.Tensor, hidden: torch.Tensor, board: torch.Tensor, positions: torch.Tensor,
                motion: torch.Tensor) -> torch.Tensor:
        """(B, N, K) model logits -> (B, N, K) float log-probabilities of the mixture (computed in float32
        whatever the model's dtype)."""
        codes = self.codes(board, positions)
        pi = self.weights(positions, motion) * (codes < self.codebook)
        gate = torch.sigmoid(hidden.float() @ self.gate.float() + self.gate_bias[motion].float()[:, None])   # (B, N)
        copy = torch.zeros_like(logits, dtype=torch.float).scatter_add(-1, codes.clamp(max=self.codebook - 1), pi)
        keep = (1 - gate * pi.sum(-1)).clamp_min(1e-6)
        mine = torch.log_softmax(logits.float(), -1) + keep.log()[..., None]
        copied = torch.where(copy > 0, (gate[..., None] * copy).clamp_min(1e-30).log(), FLOOR)
        return torch.logaddexp(mine, copied)


def install(model, layout, copy: dict | None, prompt: int) -> None:
    """Add the scheme recorded in video_prior.json's "copy" to `model` (None: nothing)."""
    if copy is None:
        return
    if copy.get("scheme") != SCHEME:
        raise ValueError(f"unknown video prior copy scheme {copy.get('scheme')!r}")
    if getattr(model.model, "motion_copy", None) is None:
        told = [copy["told"].get(name) for name in copy["motions"]] + [None]      # the null motion learns
        emb = model.model.embed_tokens.weight
        model.model.motion_copy = MotionCopy(layout.codebook, emb.shape[1], layout.height, layout.width,
                                             layout.radius, prompt, told).to(emb.device)


def module(model) -> MotionCopy | None:
    return getattr(model.model, "motion_copy", None)


def meta(motions: list[str], moves: dict) -> dict:
    """The video_prior.json entry: `moves` maps a motion to its (dx, dy) in cells a frame; the cell
    it reads one frame back is (r - dy, c - dx)."""
    return {"scheme": SCHEME, "motions": list(motions),
            "told": {name: [-dy, -dx] for name, (dx, dy) in moves.items() if name in motions}}
