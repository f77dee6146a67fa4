"""The one suite adapter of every VLM family: what a row reads besides its tokens travels in its
cache, and the family (suite.models.vlm.family) runs the forward."""
from __future__ import annotations

import copy

import torch

from ...cache import KVCache
from ..adapters import AdapterBase, AdapterConfig
from ..capabilities import Capabilities
from ..encoder_decoder import causal_mask


class VLMAdapter(AdapterBase):
    """What a row reads besides its tokens travels in its cache (`cache.row_inputs`: its prompt
    length and token budget, its image features or encoder states), put there by an adapter bound to
    its request's batch (`VLM.adapter`, `bound`); every forward reads them from the cache, so rows of
    different requests run together through the model's one adapter (suite.scheduler moves them).
    The family (`vlm.spec`) says what the rows carry and how the model takes them."""
    row_data: dict | None = None   # the row inputs of the batch this adapter is bound to (None: unbound)

    def __init__(self, vlm, model=None):
        self.vlm, self.model, self.spec = vlm, model if model is not None else vlm.model, vlm.spec
        self.config = AdapterConfig(vocab_size=vlm.vocab_size, eos_token_ids=vlm.eos, pad_token_id=vlm.pad,
                                    max_length=vlm.max_length, extra={"family": vlm.family})
        # a prompt is prefilled in one forward (its images at once; PaliGemma's prefix attends both ways)
        self.capabilities = Capabilities(custom_mask=self.spec.custom_mask, row_moves=True, whole_prompt=True)

    @property
    def device(self) -> torch.device:
        return next(self.vlm.model.parameters()).device

    def with_model(self, model):
        """The same adapter (and binding) over another model of the family (a layer-truncated draft)."""
        twin = copy.copy(self)
        twin.model = model
        return twin

    def bound(self, data: dict, prompt_lengths: list[int], max_new_tokens: int) -> "VLMAdapter":
        """This adapter bound to a batch: `data` plus each row's prompt length and token budget."""
        dev = self.device
        bound = copy.copy(self)
        bound.row_data = {**data, "prompt_len": torch.tensor(prompt_lengths, device=dev)[:, None],
                          "budget": torch.full((len(prompt_lengths), 1), max_new_tokens, device=dev)}
        return bound

    def new_cache(self, batch: int, max_len: int | None = None) -> KVCache:
        if self.row_data is None:
            raise ValueError("bind the adapter to a batch first: vlm.adapter(vlm.inputs(images, prompts), max_new_tokens)")
        bound = len(self.row_data["prompt_len"])
        if batch != bound:
            raise ValueError(f"this adapter is bound to {bound} {self.spec.rows_are}, not {batch}")
        cache = KVCache(batch, device=self.device)
        cache.row_inputs.update(self.row_data)
        self.spec.prepare_cache(cache)
        return cache

    def __call__(self, tokens, positions, cache, attention_mask, logits_from: int = 0):
        dev = self.device
        if attention_mask is None:
            attention_mask = causal_mask(cache, tokens)
        tokens, positions, mask = tokens.to(dev), positions.to(dev), attention_mask.to(dev)   # (B, N), (B, 1, N, T)
        rows = {name: t.to(dev) for name, t in cache.row_inputs.items()}       # the cache's row inputs, here
        logits = self.spec.logits(self.model, tokens, positions, mask, cache, rows, logits_from)
        rules = self.vlm.rules
        if not rules.active:
            return logits
        return rules.apply(logits, positions[:, logits_from:] + 1, rows["prompt_len"][:, 0], rows["budget"])
