"""Previous-frame inputs for the video prior: the codes of the previous frame around the cell a
slot predicts (the (2r+1)^2 neighbourhood; frame 0, cells off the grid and the frame's last cell,
which the window never shows since its slot reads BOF, are "none") reach the slot directly:
- tables: added to its input embedding, one learned table per offset;
- copy: a copy head, one gate per offset read linearly from the slot's last hidden state, added
  to the logit of the code at that offset (a pointer to "the cell one frame back, moved").
Copying the moved previous frame becomes a near-linear function of the slot's own inputs instead
of something attention must learn to find.

Installed as a submodule `model.model.prev_frame` when a folder's video_prior.json has
"inputs": {"scheme": "prev_frame", ...}; its weights are saved with the model's. Tables and gates
start at zero, so a warm start computes exactly what it computed before.

The codes come from a board: (B, L) token ids by logical position (a training sequence itself;
at inference the tokens a row has fed so far, vision/video/prior.py). The neighbourhood is what
the layout's window lets the slot see in frame t-1, so a decoder that respects the window (every
one here) has fed those codes before, or in, the forward that needs them.
"""
from __future__ import annotations

import torch
from torch import nn

SCHEME = "prev_frame"
COPY_SCALE = 64.0         # gates = W h + COPY_SCALE * b: a per-offset bias that moves as fast as W h does


class Neighbourhood(nn.Module):
    """The geometry of "frame t-1 around the cell a slot predicts": the (2r+1)^2 offsets (dr, dc),
    row-major from (-r, -r), and the codes a board holds there. No weights (its buffers are not
    saved); vision/video/motioncopy.py reads the same cells."""

    def __init__(self, codebook: int, height: int, width: int, radius: int, prompt: int):
        super().__init__()
        self.codebook, self.height, self.width, self.radius, self.prompt = codebook, height, width, radius, prompt
        side = 2 * radius + 1
        d = torch.arange(-radius, radius + 1)
        self.register_buffer("dr", d.repeat_interleave(side), persistent=False)
        self.register_buffer("dc", d.repeat(side), persistent=False)

    @property
    def offsets(self) -> int:
        return len(self.dr)

    def neighbours(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(..., N) slot positions -> board positions (..., N, O) of the previous frame's cells
        around each slot's predicted cell, and whether each exists."""
        cells = self.height * self.width
        c = positions[..., None] + 1 - self.prompt                       # the cell each slot predicts
        t = c.div(cells, rounding_mode="floor")
        r = (c % cells).div(self.width, rounding_mode="floor") + self.dr
        col = c % self.width + self.dc
        last = (r == self.height - 1) & (col == self.width - 1)     # never an input (the frame-start slot)
        ok = (t >= 1) & (r >= 0) & (r < self.height) & (col >= 0) & (col < self.width) & ~last
        return self.prompt + (t - 1) * cells + r * self.width + col, ok

    def codes(self, board: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """(B, L) board, (B, N) slot positions -> (B, N, O) neighbour codes (`codebook`: none)."""
        where, ok = self.neighbours(positions)
        b, n, o = where.shape
        codes = board.gather(1, where.clamp(0, board.shape[1] - 1).reshape(b, -1)).reshape(b, n, o)
        return torch.where(ok & (codes < self.codebook), codes, self.codebook)


class PrevFrame(Neighbourhood):
    """offsets x (codebook + 1) x hidden input tables (row `codebook` is "none") and/or an
    offsets-wide copy gate over the last hidden state; all zero at the start."""

    def __init__(self, codebook: int, hidden: int, height: int, width: int, radius: int, prompt: int,
                 tables: bool = True, copy: bool = False):
        super().__init__(codebook, height, width, radius, prompt)
        o = self.offsets
        self.weight = nn.Parameter(torch.zeros(o * (codebook + 1), hidden)) if tables else None
        self.gate = nn.Parameter(torch.zeros(o, hidden)) if copy else None
        self.gate_bias = nn.Parameter(torch.zeros(o)) if copy else None

    def forward(self, board: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """(B, L) board, (B, N) slot positions -> (B, N, hidden) features to add to the inputs."""
        codes = self.codes(board, positions)
        rows = torch.arange(codes.shape[-1], device=codes.device) * (self.codebook + 1) + codes
        return nn.functional.embedding(rows, self.weight).sum(2)

    def copy(self, logits: torch.Tensor, hidden: torch.Tensor, board: torch.Tensor, positions: torch.Tensor):
        """(B, N, K) code logits + each offset's gate at the code found there."""
        codes = self.codes(board, positions)
        gates = (hidden @ self.gate.to(hidden.dtype).T + COPY_SCALE * self.gate_bias) * (codes < self.codebook)
        return logits.scatter_add(-1, codes.clamp(max=self.codebook - 1), gates.to(logits.dtype))


def install(model, layout, inputs: dict | None, prompt: int) -> None:
    """Add the scheme recorded in video_prior.json's "inputs" to `model` (None: nothing); `prompt`
    is the number of conditioning slots before the first frame."""
    if inputs is None:
        return
    if inputs.get("scheme") != SCHEME:
        raise ValueError(f"unknown video prior input scheme {inputs.get('scheme')!r}")
    if getattr(model.model, "prev_frame", None) is None:
        emb = model.model.embed_tokens.weight
        model.model.prev_frame = PrevFrame(layout.codebook, emb.shape[1], layout.height, layout.width,
                                           int(inputs["radius"]), prompt, inputs.get("tables", True),
                                           inputs.get("copy", False)).to(emb.device)


def module(model) -> PrevFrame | None:
    return getattr(model.model, "prev_frame", None)


def embed(model, ids: torch.Tensor, board: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """The model's input embeddings of (B, N) ids at `positions`, plus the previous-frame
    features read from `board` when the module is installed."""
    x = model.model.embed_tokens(ids)
    extra = module(model)
    return x if extra is None or extra.weight is None else x + extra(board, positions).to(x.dtype)


def logits(model, hidden: torch.Tensor, board: torch.Tensor, positions: torch.Tensor, codebook: int) -> torch.Tensor:
    """(B, N, K) code logits of the last hidden states at `positions`, with the copy head's gates
    when the module has one."""
    out = model.lm_head(hidden)[..., :codebook]
    extra = module(model)
    return out if extra is None or extra.gate is None else extra.copy(out, hidden, board, positions)


def meta(radius: int = 1, tables: bool = True, copy: bool = False) -> dict:
    """The video_prior.json entry of this scheme."""
    return {"scheme": SCHEME, "radius": radius, "tables": tables, "copy": copy}
