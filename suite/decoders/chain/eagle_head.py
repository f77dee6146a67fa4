"""The EAGLE draft head (Li et al. 2024, "EAGLE: Speculative Sampling Requires Rethinking Feature
Uncertainty"), with a reduced draft vocabulary (FR-Spec, Zhao et al. 2025).

The head drafts at the feature level: the pair (f_t, x_{t+1}) of the target's last hidden state at
position t and the embedding of the next token is fused by one linear layer, then one Llama-style
decoder layer predicts f_{t+1}. Draft logits come from the target's own LM head restricted to the
K most frequent tokens of the training text (`vocab_ids`), so a draft step costs a few percent of a
target forward. The target's embeddings and LM head are borrowed at `bind_target`, never stored.

`step` is the layer's one pass (fuse, project, attend over a past K/V and the new slots under a mask,
finish): the decoder runs it over its KV cache with a tree mask, training runs EAGLE-3's multi-step
unroll with it. `logits` maps its output to draft logits.
Shapes: B batch, N new slots, S cached slots, D hidden, H heads, Hk KV heads, d head size, K draft vocab.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import nn

from ...cost import weight_share
from ...models.hf_fields import ConfigFields

CONFIG_KEYS = ("hidden_size", "vocab_size", "num_attention_heads", "num_key_value_heads", "head_dim",
               "intermediate_size", "rope_theta", "rms_norm_eps", "draft_vocab_size")


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(dim)), eps

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], -1)
    return x * cos + rotated * sin


class EagleHead(nn.Module):
    def __init__(self, hidden_size: int, vocab_size: int, num_attention_heads: int, num_key_value_heads: int,
                 head_dim: int, intermediate_size: int, rope_theta: float, rms_norm_eps: float,
                 draft_vocab_size: int, **_):
        super().__init__()
        self.config = dict(hidden_size=hidden_size, vocab_size=vocab_size, num_attention_heads=num_attention_heads,
                           num_key_value_heads=num_key_value_heads, head_dim=head_dim,
                           intermediate_size=intermediate_size, rope_theta=rope_theta,
                           rms_norm_eps=rms_norm_eps, draft_vocab_size=draft_vocab_size)
        d, h, hk = hidden_size, num_attention_heads, num_key_value_heads
        self.heads, self.kv_heads, self.head_dim = h, hk, head_dim
        self.fc = nn.Linear(2 * d, d)
        self.input_norm = RMSNorm(d, rms_norm_eps)
        self.q_proj = nn.Linear(d, h * head_dim, bias=False)
        self.k_proj = nn.Linear(d, hk * head_dim, bias=False)
        self.v_proj = nn.Linear(d, hk * head_dim, bias=False)
        self.o_proj = nn.Linear(h * head_dim, d, bias=False)
        self.post_norm = RMSNorm(d, rms_norm_eps)
        self.gate_proj = nn.Linear(d, intermediate_size, bias=False)
        self.up_proj = nn.Linear(d, intermediate_size, bias=False)
        self.down_proj = nn.Linear(intermediate_size, d, bias=False)
        self.register_buffer("vocab_ids", torch.arange(draft_vocab_size), persistent=True)   # (K,)
        inv = 1.0 / rope_theta ** (torch.arange(0, head_dim, 2).float() / head_dim)
        self.register_buffer("inv_freq", inv, persistent=False)
        self.embed: torch.Tensor | None = None      # (V, D) the target's token embeddings
        self.lm_rows: torch.Tensor | None = None    # (K, D) the target's LM head rows of vocab_ids
        self.price: float | None = None             # a head forward's price in target forwards (suite.cost.weight_share)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, std=0.02)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)

    # -- the target it drafts for ---------------------------------------------------------------

    @classmethod
    def for_target(cls, target_config, draft_vocab_size: int) -> "EagleHead":
        """A fresh head shaped like one decoder layer of a Llama-style target config."""
        c = ConfigFields.read(target_config)
        eps = 1e-6 if c.rms_norm_eps is None else c.rms_norm_eps
        return cls(c.hidden_size, c.vocab_size, c.num_heads, c.kv_heads, c.head_size, c.intermediate_size, c.rope_base,
                   float(eps), draft_vocab_size)

    def check_target(self, target) -> None:
        """A head trained for another model is refused, naming both sizes."""
        emb = target.get_input_embeddings().weight
        vocab, hidden = target.get_output_embeddings().weight.shape[0], emb.shape[1]
        want_v, want_d = self.config["vocab_size"], self.config["hidden_size"]
        if (vocab, hidden) != (want_v, want_d):
            raise ValueError(f"this EAGLE head was trained for a model with vocabulary {want_v} and hidden size "
                             f"{want_d}; the target has vocabulary {vocab} and hidden size {hidden}: train a head "
                             "for it (python -m text.train_draft for the embedded SmolLM2)")

    def bind_target(self, target) -> "EagleHead":
        """Borrow the target's embeddings and LM head rows (frozen); returns self."""
        self.check_target(target)
        w = target.get_output_embeddings().weight
        self.embed = target.get_input_embeddings().weight.detach()
        self.lm_rows = w.detach()[self.vocab_ids.to(w.device)].to(self.fc.weight.dtype).contiguous()
        self.price = weight_share(self, target, extra=self.lm_rows.numel())
        return self

    # -- the layer: its parts, and `step`, which runs them ----------------------------------------

    def fuse(self, feature: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """(B, N, D) features f_t and (B, N) next tokens x_{t+1} -> (B, N, D) the layer's input."""
        e = self.embed[tokens].to(feature.dtype)
        return self.fc(torch.cat([e, feature], -1))

    def project(self, x: torch.Tensor, positions: torch.Tensor):
        """(B, N, D) -> q (B, H, N, d), k and v (B, Hk, N, d), rotated at positions (B, N)."""
        b, n, _ = x.shape
        y = self.input_norm(x)
        q = self.q_proj(y).view(b, n, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(y).view(b, n, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(y).view(b, n, self.kv_heads, self.head_dim).transpose(1, 2)
        angles = positions[:, None, :, None].to(x.dtype) * self.inv_freq.to(x.dtype)    # (B, 1, N, d/2)
        cos, sin = torch.cat([angles.cos()] * 2, -1), torch.cat([angles.sin()] * 2, -1)
        return _rotate(q, cos, sin), _rotate(k, cos, sin), v

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """q (B, H, N, d) over k, v (B, Hk, S, d) with mask (B, 1, N, S) bool -> (B, N, H*d)."""
        rep = self.heads // self.kv_heads
        k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return out.transpose(1, 2).reshape(q.shape[0], q.shape[2], -1)

    def finish(self, x: torch.Tensor, attended: torch.Tensor) -> torch.Tensor:
        """Residual, MLP -> (B, N, D) the predicted next features f̂_{t+1}."""
        x = x + self.o_proj(attended)
        y = self.post_norm(x)
        return x + self.down_proj(torch.nn.functional.silu(self.gate_proj(y)) * self.up_proj(y))

    def logits(self, feature: torch.Tensor) -> torch.Tensor:
        """(..., D) -> (..., K) draft logits over the reduced vocabulary."""
        return feature @ self.lm_rows.T

    def step(self, feature: torch.Tensor, tokens: torch.Tensor, positions: torch.Tensor,
             mask: torch.Tensor | None = None, past: tuple[torch.Tensor, torch.Tensor] | None = None,
             return_kv: bool = False):
        """One pass of the layer over N new slots: the pairs (f_t, x_{t+1}) (features (B, N, D), tokens
        (B, N)) at positions (B, N) attend to the past keys and values (k, v each (B, Hk, S, d); None:
        S = 0) followed by their own, under mask (B or 1, 1, N, S + N) bool (None: plain causal, every
        new slot sees the whole past and the new slots up to itself).
        -> f̂ (B, N, D) the predicted next features; with return_kv, (f̂, k, v) where k, v are
        (B, Hk, S + N, d): the past's then the new slots' (the cache after this step)."""
        x = self.fuse(feature, tokens)
        q, k, v = self.project(x, positions)
        if past is not None:
            k, v = torch.cat([past[0], k], 2), torch.cat([past[1], v], 2)
        if mask is None:
            n, s = x.shape[1], k.shape[2] - x.shape[1]
            mask = torch.ones(n, s + n, dtype=torch.bool, device=x.device).tril(s)[None, None]
        out = self.finish(x, self.attend(q, k, v, mask))
        return (out, k, v) if return_kv else out

    def forward(self, feature, tokens, positions):
        """Causal teacher-forced pass over whole sequences (training's first step) -> (f̂, k, v)."""
        return self.step(feature, tokens, positions, return_kv=True)

    # -- files ---------------------------------------------------------------------------------------

    def save(self, folder, extra_config: dict | None = None, dtype=torch.float16) -> None:
        from ...runtime.storage import save_weights
        state = {k: (v.to(dtype) if v.is_floating_point() else v.to(torch.int32))
                 for k, v in self.state_dict().items()}
        save_weights(folder, state, {**self.config, **(extra_config or {})})

    @classmethod
    def from_folder(cls, folder, fix: str = "python -m text.train_draft") -> "EagleHead":
        """Load model.safetensors + config.json; missing or corrupt files raise a ValueError naming `fix`."""
        folder = Path(folder)
        try:
            config = json.loads((folder / "config.json").read_text())
            from safetensors.torch import load_file
            state = load_file(str(folder / "model.safetensors"))
            head = cls(**{k: config[k] for k in CONFIG_KEYS})
            state = {k: (v.float() if v.is_floating_point() else v.long()) for k, v in state.items()}
            head.load_state_dict(state)
        except FileNotFoundError as e:
            raise ValueError(f"no EAGLE draft weights in {folder} ({Path(e.filename or '').name} missing): "
                             f"train them with {fix}") from e
        except Exception as e:   # corrupt JSON, a bad safetensors header (SafetensorError), wrong shapes
            raise ValueError(f"the EAGLE draft weights in {folder} are unreadable ({str(e).splitlines()[0][:200]}): "
                             f"retrain them with {fix}") from e
        if not all(bool(torch.isfinite(p.detach()).all()) for p in head.parameters()):
            raise ValueError(f"the EAGLE draft weights in {folder} hold NaN or inf: retrain them with {fix}")
        return head.eval()
