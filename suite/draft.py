"""A step's data: the `Draft` one forward scores (its tokens, positions and masks; a canvas model's
`Canvas`) and the decoder's `Acceptance` of it (suite.loop runs the step)."""
from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import Any

import torch

from kernels.reference import causal_mask


@dataclass
class Draft:
    """What one forward scores. tokens/positions (B, N); mask (B, N, N) visibility among the
    draft's own slots (the cache part comes from the cache's validity); valid (B, N) marks
    real slots (rows are padded to the longest draft); meta is the decoder's bookkeeping. The
    forward returns logits for slots logits_from.. only: index them with `slot - logits_from`."""

    tokens: torch.Tensor
    positions: torch.Tensor
    mask: torch.Tensor                      # every slot sees itself (the diagonal is True)
    valid: torch.Tensor
    meta: Any = None
    logits_from: int = 0     # logits are needed for slots >= this only (prefill needs one)
    past_mask: torch.Tensor | None = None   # (B, N, S) cached slots each draft slot may see
                                            # (AND the cache's validity); None = every live slot
    want_hidden: bool = False               # ask the forward for the target's last hidden states
    hidden: torch.Tensor | None = None      # (B, N, D) filled by the loop when want_hidden (every slot)
    lengths: list[int] | None = None        # real slots per row, on the host (from_rows fills it)
    causal: bool = False                    # every row has N real slots and a causal mask: with no past_mask
                                            # and a cache without holes, the model's own causal mask is this one
    canvas: "Canvas | None" = None          # for a canvas model (`capabilities.canvas`): where each row's
                                            # canvas starts; None for a causal model

    @staticmethod
    def from_rows(tokens: list[list[int]], positions: list[list[int]],
                  masks: list[torch.Tensor | None] | None = None, meta: Any = None,
                  logits_from: int = 0, *, device: torch.device, canvas: "Canvas | None" = None) -> "Draft":
        """Pad per-row drafts to one (B, N) block on `device` (the request's, `state.device`);
        a row's mask (on that device too) defaults to causal."""
        lengths = [len(t) for t in tokens]
        n = max(1, max(lengths))
        both = torch.tensor([[list(t) + [0] * (n - len(t)) for t in tokens],
                             [list(p) + [0] * (n - len(p)) for p in positions]], dtype=torch.long, device=device)
        if min(lengths) == n and not any(m is not None for m in masks or []):          # no padding: the common case
            mask, valid = _causal_block(len(tokens), n, torch.device(device))
            return Draft(both[0], both[1], mask, valid, meta, logits_from, lengths=lengths, causal=True, canvas=canvas)
        causal = causal_mask(n, device=device)                                          # (N, N)
        valid = torch.arange(n, device=device)[None] < torch.tensor(lengths, device=device)[:, None]   # (B, N)
        # real slots see the real slots before them; padding sees itself only
        mask = (causal[None] & valid[:, :, None]) | torch.eye(n, dtype=torch.bool, device=device)[None]
        for b, row_mask in enumerate(masks or []):
            if row_mask is not None:
                mask[b, :len(tokens[b]), :len(tokens[b])] = row_mask
        return Draft(both[0], both[1], mask, valid, meta, logits_from, lengths=lengths, canvas=canvas)

    def padded(self, width: int) -> "Draft":
        """This draft with empty slots appended up to `width` (a step of fixed shape, suite.loop.advance):
        token 0 at the row's first position, seeing itself only, not valid; the loop scores them and
        drops their K/V and logits. Real slots never see them, so their logits are what they would be."""
        b, n = self.tokens.shape
        extra = width - n
        if extra <= 0:
            return self
        dev = self.tokens.device
        mask = torch.zeros(b, width, width, dtype=torch.bool, device=dev)
        mask[:, :n, :n] = self.mask
        mask[:, n:, n:] = torch.eye(extra, dtype=torch.bool, device=dev)
        past = None if self.past_mask is None else torch.cat(
            [self.past_mask, self.past_mask.new_zeros(b, extra, self.past_mask.shape[2])], 1)
        return replace(self, tokens=torch.cat([self.tokens, self.tokens.new_zeros(b, extra)], 1),
                       positions=torch.cat([self.positions, self.positions[:, :1].expand(b, extra)], 1),
                       mask=mask, valid=torch.cat([self.valid, self.valid.new_zeros(b, extra)], 1), past_mask=past,
                       causal=False)


@dataclass
class Canvas:
    """A canvas model's draft layout (an encoder over the committed text, a decoder that denoises a
    canvas, e.g. DiffusionGemma). Row b's slots [0, starts[b]) are committed text for the encoder
    (their K/V is cached and kept: only these slots take cache slots); slots [starts[b], ends[b])
    are its canvas, and the logits of a canvas slot predict that slot's own token (no shift)."""
    starts: list[int]
    ends: list[int]
    self_conditioning: torch.Tensor | None = None   # (B, L, V) logits of the previous denoising step, or None
    conditioned: torch.Tensor | None = None         # (B,) bool: rows whose self_conditioning is real (None: all)

    @property
    def width(self) -> int:
        """Cache slots this forward writes: the longest row's committed text."""
        return max(self.starts, default=0)


@functools.lru_cache(maxsize=64)
def _causal_block(batch: int, n: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The (B, N, N) causal mask and (B, N) all-True validity of an unpadded draft, built once per
    shape and shared by every draft of that shape (read only: nothing writes into a draft's mask)."""
    return (causal_mask(n, device=device).expand(batch, n, n),
            torch.ones(batch, n, dtype=torch.bool, device=device))


@dataclass
class Acceptance:
    """committed: new tokens per row, in order. keep (B, N): draft slots whose K/V stays live;
    they must be the committed tokens that directly follow the row's cached ones."""

    committed: list[list[int]]
    keep: torch.Tensor
    kept: list[int] | None = None    # given: keep is each row's first kept[b] slots, known on the host (no sync)
    refining: bool = False           # a canvas step: a row may commit nothing while its canvas is refined
                                     # (the decoder bounds its steps itself)
