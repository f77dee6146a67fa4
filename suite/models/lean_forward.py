"""transformers' forward of a Llama-family causal LM, op for op, without its per-module plumbing.

A decode step of a small model on a CPU is mostly its weights streamed through the matmuls and a few
thousand small ops; transformers adds to each layer its module calls, keyword plumbing, mask and output
handling. `lean_forward(model)` runs the same ops in the same order on the same modules (the embedding,
the rotary module, each layer's projections, the static cache layers' `update`, the attention function
the model is set to, the LM head), so its logits are transformers' bit for bit
(tests/core/test_lean_forward.py, float32 and bfloat16): SmolLM2's `ar` in bfloat16 on one core runs
1.06x faster end to end (BENCHMARKS.md, "Where a lone row's step goes"). It serves a static cache's eager
decode steps and prefill chunks (suite.models.static_cache.StaticHFCausalLM) for the families whose
forward it mirrors; any other model, a compiled step, or a step that returns hidden states runs
transformers' forward.
"""
from __future__ import annotations

import sys
from types import SimpleNamespace

import torch

FAMILIES = ("LlamaForCausalLM", "Qwen2ForCausalLM")    # their layers: pre-norm attention, then a gated MLP


def lean_forward(model):
    """`model`'s forward as `LeanForward`, or None for a model whose forward this does not mirror."""
    config = model.config
    if type(model).__name__ not in FAMILIES or getattr(config, "use_sliding_window", False):
        return None
    return LeanForward(model)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _rms_norm(norm, x: torch.Tensor) -> torch.Tensor:
    """transformers' RMSNorm: the variance in float32, the scale in the model's dtype."""
    dtype = x.dtype
    x = x.to(torch.float32)
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + norm.variance_epsilon)
    return norm.weight * x.to(dtype)


class LeanForward:
    """Called as transformers' forward is by StaticHFCausalLM (input_ids, position_ids, cache: a
    StaticCache, attention_mask: (B, 1, N, window) bool, logits_to_keep); returns `.logits`."""

    def __init__(self, model):
        from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
        self.model = model
        layer = model.model.layers[0].self_attn        # the attention function the model's layers call
        eager = sys.modules[type(layer).__module__].eager_attention_forward
        self.attention = ALL_ATTENTION_FUNCTIONS.get_interface(model.config._attn_implementation, eager)

    @torch.no_grad()
    def __call__(self, input_ids, position_ids, cache, attention_mask, logits_to_keep: int = 0, **_):
        body = self.model.model
        rows, n = input_ids.shape
        x = body.embed_tokens(input_ids)
        cos, sin = body.rotary_emb(x, position_ids)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        for layer, kv in zip(body.layers, cache.layers):
            attn, mlp = layer.self_attn, layer.mlp
            h = _rms_norm(layer.input_layernorm, x)
            heads = (rows, n, -1, attn.head_dim)
            q = attn.q_proj(h).view(heads).transpose(1, 2)       # q first: a fused q/k/v group computes on it
            k = attn.k_proj(h).view(heads).transpose(1, 2)
            v = attn.v_proj(h).view(heads).transpose(1, 2)
            q = (q * cos) + (_rotate_half(q) * sin)
            k = (k * cos) + (_rotate_half(k) * sin)
            k, v = kv.update(k, v)
            out, _ = self.attention(attn, q, k, v, attention_mask, dropout=0.0, scaling=attn.scaling)
            x = x + attn.o_proj(out.reshape(rows, n, -1).contiguous())
            h = _rms_norm(layer.post_attention_layernorm, x)
            x = x + mlp.down_proj(mlp.act_fn(mlp.gate_proj(h)) * mlp.up_proj(h))
        x = _rms_norm(body.norm, x)
        return SimpleNamespace(logits=self.model.lm_head(x[:, -logits_to_keep:] if logits_to_keep else x))
