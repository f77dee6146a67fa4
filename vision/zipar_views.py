"""ZipAR's views as a training objective: teach the raster prior to predict each cell from exactly
what `suite.decoders.raster.zipar` shows it, so next-set decoding stays close to `ar` in quality.

With window w, cell (r, c) is sampled at step t = r*w + c, and the slot that predicts it sees the
class token and the cells of earlier steps at raster-earlier positions (the decoder's 4-D mask).
One training sequence replays a whole ZipAR decode of an image at once:

    [class] ++ the H*W codes at their raster positions ++ one placeholder per row start r >= 1

A code slot sees the cells of its own step or earlier that precede it in raster order (what its
K/V saw when the decoder fed it); it predicts the next cell of its row. Row r >= 1 starts from a
placeholder at the position of cell (r-1, W-1), holding the latest generated token (r-1, w-1), as
the decoder feeds it. The loss reads, for every cell, the slot that predicts it in the decoder.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class ZipARLayout:
    cells: torch.Tensor      # (L,) code cell each slot holds (-1: the class token)
    positions: torch.Tensor  # (L,) position ids
    mask: torch.Tensor       # (L, L) bool, query x key
    sources: torch.Tensor    # (H*W,) the slot whose output predicts each cell

    def to(self, device) -> "ZipARLayout":
        return ZipARLayout(*(t.to(device) for t in (self.cells, self.positions, self.mask, self.sources)))


def zipar_layout(height: int, width: int, window: int) -> ZipARLayout:
    """The slots, positions, mask and prediction sources of one ZipAR decode (window < width)."""
    if not 1 <= window < width:
        raise ValueError(f"ZipAR views need 1 <= window < {width} (window = width is plain raster)")
    n = height * width
    step = torch.arange(n) // width * window + torch.arange(n) % width       # (N,) sampling step of each cell
    rows = torch.arange(1, height)
    cells = torch.cat([torch.tensor([-1]), torch.arange(n), (rows - 1) * width + window - 1])
    positions = torch.cat([torch.tensor([0]), 1 + torch.arange(n), rows * width])
    horizon = torch.cat([torch.tensor([-1]), step, rows * window - 1])          # a slot sees steps <= horizon
    real = cells >= 0
    real[1 + n:] = False                                                        # placeholders are never seen
    key_step = torch.where(real, step[cells.clamp(min=0)], torch.iinfo(torch.long).max)
    mask = real[None, :] & (positions[None, :] < positions[:, None]) & (key_step[None, :] <= horizon[:, None])
    mask[:, 0] = True
    mask |= torch.eye(len(cells), dtype=torch.bool)
    sources = torch.arange(n)                                                   # cell q <- slot q (holds q-1)
    sources[rows * width] = 1 + n + rows - 1                                    # row starts <- placeholders
    return ZipARLayout(cells, positions, mask, sources)


def zipar_logits(model, codes: torch.Tensor, class_ids: torch.Tensor, layout: ZipARLayout, k: int) -> torch.Tensor:
    """(B, H*W, k) code logits of every cell from its ZipAR view; codes (B, H*W), class_ids (B,)."""
    ids = torch.cat([class_ids[:, None], codes[:, layout.cells[1:]]], 1)
    b = len(ids)
    out = model(input_ids=ids, position_ids=layout.positions.expand(b, -1),
                attention_mask=layout.mask[None, None].expand(b, 1, -1, -1)).logits
    return out[:, layout.sources, :k]


def zipar_loss(model, codes: torch.Tensor, class_ids: torch.Tensor, layout: ZipARLayout, k: int) -> torch.Tensor:
    """Cross-entropy (mean over B * H*W) of every cell predicted from its ZipAR view."""
    logits = zipar_logits(model, codes, class_ids, layout, k)
    return torch.nn.functional.cross_entropy(logits.reshape(-1, k), codes.reshape(-1))
