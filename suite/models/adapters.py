"""Model adapters: the only way decoders reach a model.

`logits = model(tokens, positions, cache, attention_mask)` with tokens/positions (B, N),
cache a `KVCache`, attention_mask (B, 1, N, S+N) bool (True = attend) -> logits (B, N - logits_from, V)
(slots before `logits_from` need no logits: a long prefill skips most of the LM head).
attention_mask None means plain causal (every cached slot, then causal among the N new ones): an
adapter with `capabilities.plain_mask` hands None on to its model as it is, and only gets it when
`suite.loop.plain_causal` says so (a cache without holes); an adapter never inspects a mask's values.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import torch

from ..cache import KVCache
from .capabilities import Capabilities
from .hf_fields import ConfigFields, GenerationFields


@dataclass(frozen=True)
class AdapterConfig:
    vocab_size: int
    eos_token_ids: frozenset[int] = frozenset()
    pad_token_id: int = 0
    max_length: int | None = None
    extra: dict = field(default_factory=dict)   # grid size, codebooks, mask id, classes ...


@runtime_checkable
class ModelAdapter(Protocol):
    """What the loop calls. output_hidden: with `capabilities.hidden_states`, also return the last
    hidden states (B, N, D); canvas: a canvas model's `suite.draft.Canvas` (`capabilities.canvas`)."""
    config: AdapterConfig
    capabilities: Capabilities

    def __call__(self, tokens: torch.Tensor, positions: torch.Tensor, cache: KVCache,
                 attention_mask: torch.Tensor | None, logits_from: int = 0, **kwargs) -> torch.Tensor: ...

    def new_cache(self, batch: int, max_len: int | None = None) -> KVCache: ...

    def check_request(self, rows: list[list[int]], max_new_tokens: int) -> None: ...


class AdapterBase:
    """The defaults of an adapter: no capability beyond plain decoding, any request size."""

    capabilities = Capabilities()

    def check_request(self, rows: list[list[int]], max_new_tokens: int) -> None:
        """Refuse a request this adapter cannot hold (a static cache's size); the default holds any."""

    def fill_cross(self, cache: KVCache) -> None:
        raise NotImplementedError(f"{type(self).__name__} has no cross-attention to fill (capabilities.fills_cross)")


def _as_set(ids) -> frozenset[int]:
    if ids is None:
        return frozenset()
    return frozenset([ids] if isinstance(ids, int) else ids)


class HFCausalLM(AdapterBase):
    """Any transformers causal LM, through its public forward (position ids, 4-D masks, cache).
    attention_mask=None is the model's own causal mask (about 2x faster SDPA on a CPU)."""

    capabilities = Capabilities(custom_mask=True, hidden_states=True, row_moves=True, plain_mask=True,
                                cost_model=True)

    def __init__(self, model, eos_token_id=None, pad_token_id=None, linear_forms: bool = False):
        """linear_forms=True swaps the model's nn.Linear layers (in place) for the per-width matmul
        forms measured fastest on this CPU (suite.models.linear_forms); config.extra["linear_forms"]
        records the model's choice either way ({} when not swapped)."""
        from .linear_forms import describe, swap_linears
        self.model = model.eval()
        self._param = next(model.parameters())   # .device follows the model when it is moved in place
        forms = swap_linears(model) if linear_forms else describe(model)
        cfg, gen = ConfigFields.read(model.config), GenerationFields.of(model)
        eos = _as_set(eos_token_id if eos_token_id is not None else gen.eos_token_id or cfg.eos_token_id)
        pad = next((p for p in (pad_token_id, gen.pad_token_id, cfg.pad_token_id) if p is not None), min(eos, default=0))
        self.config = AdapterConfig(vocab_size=model.get_output_embeddings().weight.shape[0],
                                    eos_token_ids=eos, pad_token_id=int(pad), max_length=cfg.max_length,
                                    extra={"linear_forms": forms})

    @property
    def device(self) -> torch.device:
        return self._param.device

    def cost_identity(self) -> list[str]:
        """What its measured cost curve depends on besides the machine (suite.cost's cache key):
        the model class, its config, its matmul forms, dtype and device."""
        return [type(self.model).__name__, self.model.config.to_json_string(use_diff=False),
                repr(sorted(self.config.extra["linear_forms"].items())), str(self._param.dtype), str(self.device)]

    def new_cache(self, batch: int, max_len: int | None = None) -> KVCache:
        return KVCache(batch, device=self.device)

    def __call__(self, tokens, positions, cache, attention_mask, logits_from: int = 0, output_hidden: bool = False):
        dev = self.device
        mask = None if attention_mask is None else attention_mask.to(dev)   # None: the model's own causal mask
        out = self.model(input_ids=tokens.to(dev), position_ids=positions.to(dev), cache=cache.backend,
                         attention_mask=mask, use_cache=True, logits_to_keep=tokens.shape[1] - logits_from,
                         output_hidden_states=output_hidden)
        return (out.logits, out.hidden_states[-1]) if output_hidden else out.logits


def as_adapter(model) -> ModelAdapter:
    """Wrap a transformers model; pass adapters through unchanged."""
    if isinstance(model, ModelAdapter):
        return model
    if ConfigFields.of(model).model_type == "diffusion_gemma":
        raise ValueError("DiffusionGemma is a block-diffusion model, not a causal LM: wrap it with "
                         "text.diffusion_gemma.DiffusionGemmaAdapter(model), or load its folder with text.load(folder)")
    if hasattr(model, "config") and hasattr(model, "get_output_embeddings"):
        return HFCausalLM(model)
    raise ValueError(f"cannot decode with a {type(model).__name__}: pass a transformers causal LM "
                     "or an object implementing suite.ModelAdapter")


def layer_truncated_draft(model, num_layers: int):
    """A self-speculative draft: the first `num_layers` decoder layers of `model`, sharing its
    embeddings, final norm and LM head (no new weights). Works for models laid out as
    `model.model.layers` (Llama, Qwen2, Mistral, SmolLM2, ...)."""
    try:
        inner, layers = model.get_submodule("model"), model.get_submodule("model.layers")
    except AttributeError:
        raise ValueError(f"{type(model).__name__} has no model.layers; pass draft_model= instead of draft='self:N'") from None
    if not 1 <= num_layers < len(layers):
        raise ValueError(f"draft='self:{num_layers}' needs 1 <= N < {len(layers)} (the model's layer count)")
    cfg = copy.deepcopy(model.config)
    cfg.num_hidden_layers = num_layers
    if ConfigFields.read(cfg).layer_types is not None:
        cfg.layer_types = cfg.layer_types[:num_layers]
    draft_inner = copy.copy(inner)
    draft_inner._modules = dict(inner._modules)
    draft_inner._modules["layers"] = torch.nn.ModuleList(list(layers)[:num_layers])
    draft_inner.config = cfg
    draft = copy.copy(model)
    draft._modules = dict(model._modules)
    draft._modules["model"] = draft_inner
    draft.config = cfg
    return draft
