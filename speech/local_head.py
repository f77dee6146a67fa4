"""The local (depth) transformer over the Q codebooks of one frame, conditioned on the backbone's
hidden state (RQ-Transformer, Lee et al. 2022; Moshi's depth transformer, Défossez et al. 2024).
It may span S frames (S*Q code slots, frame by frame: the `stack_local` decoder's two frames per
backbone step); a call may pass the first n <= S*Q slots only (`local_ar` reads the first frame).

One small network, two ways to run it (a mode embedding tells them apart):
- "ar": causal over [h, c_0, ..., c_{Q-1}]; the output at slot q predicts codebook q from h and
  c_<q (the `local_ar` decoder: Q local passes per frame).
- "maskgit": bidirectional over [h, c_0 or MASK, ..., c_{Q-1} or MASK]; the output at slot q+1
  predicts codebook q from h and the unmasked codebooks (the `local_maskgit` decoder: a few
  passes per frame, MaskGIT, Chang et al. 2022).
Ids: codes 0..C-1, BOS (never predicted), EOS, then MASK (= the frame model's PAD id).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

MODES = ("ar", "maskgit")


class LocalTransformer(nn.Module):
    def __init__(self, backbone_hidden: int, q: int, out_vocab: int, hidden: int = 128, layers: int = 2,
                 heads: int = 4):
        """q: the code slots (codebooks x frames spanned)."""
        super().__init__()
        self.q, self.out_vocab, self.mask_id = q, out_vocab, out_vocab   # MASK: the id after EOS
        self.proj = nn.Linear(backbone_hidden, hidden)
        self.embed = nn.Embedding(q * (out_vocab + 1), hidden)           # per-codebook tables, offset by q
        self.slot = nn.Embedding(q + 1, hidden)
        self.mode = nn.Embedding(len(MODES), hidden)
        layer = nn.TransformerEncoderLayer(hidden, heads, 3 * hidden, dropout=0.0, batch_first=True, norm_first=True)
        self.layers = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(hidden)
        self.heads = nn.Parameter(torch.randn(q, hidden, out_vocab) * hidden ** -0.5)   # (Q, d, V)

    def forward(self, h: torch.Tensor, codes: torch.Tensor, mode: str) -> torch.Tensor:
        """h (M, D) backbone states, codes (M, n) ids of the first n <= q slots (MASK where unknown)
        -> logits (M, n, V). ar: slot i's logits see h and codes[:, :i] only (codes[:, i:] are ignored)."""
        n = codes.shape[1]
        if n > self.q:
            raise ValueError(f"this local transformer spans {self.q} code slots, got {n}")
        offsets = torch.arange(n, device=codes.device) * (self.out_vocab + 1)
        x = torch.cat([self.proj(h)[:, None], self.embed(codes + offsets)], 1)          # (M, n+1, d)
        x = x + self.slot.weight[None, :n + 1] + self.mode.weight[MODES.index(mode)]
        causal = mode == "ar"
        if self.training:
            mask = nn.Transformer.generate_square_subsequent_mask(n + 1, device=h.device) if causal else None
            y = self.norm(self.layers(x, mask=mask, is_causal=causal))
        else:
            y = self.norm(self._eval_layers(x, causal))
        y = y[:, :n] if causal else y[:, 1:]                                               # (M, n, d)
        return torch.einsum("mqd,qdv->mqv", y, self.heads[:n])

    def _eval_layers(self, x: torch.Tensor, causal: bool) -> torch.Tensor:
        """The same pre-norm layers (same parameters, same math) as plain functional calls: over a
        handful of slots nn.TransformerEncoder's per-call overhead is ~10x the arithmetic."""
        for layer in self.layers.layers:
            att = layer.self_attn
            y = F.layer_norm(x, x.shape[-1:], layer.norm1.weight, layer.norm1.bias, layer.norm1.eps)
            qkv = F.linear(y, att.in_proj_weight, att.in_proj_bias).unflatten(-1, (3, att.num_heads, -1))
            q, k, v = qkv.permute(2, 0, 3, 1, 4)                                        # (M, heads, Q+1, d/heads)
            o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            x = x + F.linear(o.transpose(1, 2).flatten(2), att.out_proj.weight, att.out_proj.bias)
            y = F.layer_norm(x, x.shape[-1:], layer.norm2.weight, layer.norm2.bias, layer.norm2.eps)
            x = x + layer.linear2(layer.activation(layer.linear1(y)))
        return x
