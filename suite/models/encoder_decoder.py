"""Encoder-decoder models (the VisionEncoderDecoder layout: a transformers decoder whose layers
cross-attend to encoder states): the adapter bound to one batch of encoder states, and the model
folder of a decoder whose output head is tied to its input embedding."""
from __future__ import annotations

import copy
from pathlib import Path

import torch

from ..cache import KVCache
from .adapters import AdapterBase
from .capabilities import Capabilities
from ..runtime.storage import load_weights, save_weights

TIED_HEAD = "decoder.lm_head.weight"      # tied to the decoder's input embedding: never saved


def causal_mask(cache: KVCache, tokens: torch.Tensor) -> torch.Tensor:
    """(B, 1, N, T) plain causal attention of N new tokens (B, N) over the cache and each other."""
    b, n = tokens.shape[:2]
    return cache.attention_mask(torch.ones(n, n, dtype=torch.bool, device=cache.valid.device).tril().expand(b, n, n))


class CrossAttentionAdapter(AdapterBase):
    """Base of a suite.ModelAdapter over `self.model.decoder` with encoder states (B, S, D): an
    adapter bound to a batch of them (`self.encoder_states`) puts them into each cache it makes
    (`cache.row_inputs`), and every forward reads them from the cache, so rows of different
    requests run together through any adapter of the model (suite.scheduler moves them). The
    self-attention K/V lives in suite's KVCache, the cross-attention K/V is computed on a row's
    first forward and kept beside it (`cache.encdec`). Subclasses bind the states (`for_images`)
    and set `bind_hint`, the call that does so."""

    bind_hint = "adapter.for_images(pixels)"
    encoder_states: torch.Tensor | None = None

    def new_cache(self, batch: int, max_len: int | None = None) -> KVCache:
        from transformers import DynamicCache, EncoderDecoderCache
        if self.encoder_states is None or self.encoder_states.shape[0] != batch:
            raise ValueError(f"bind the adapter to a batch of images first: {self.bind_hint}")
        cache = KVCache(batch, device=self.encoder_states.device)
        cache.encdec = EncoderDecoderCache(cache.backend, DynamicCache())   # cross K/V: filled once
        cache.row_inputs["encoder_states"] = self.encoder_states
        cache.row_inputs["encoder_mask"] = torch.ones(self.encoder_states.shape[:2], dtype=torch.bool,
                                                      device=self.encoder_states.device)
        return cache

    def rows(self, index: list[int]):
        """This adapter bound to the encoder states of rows `index` only (one request's rows)."""
        bound = copy.copy(self)
        bound.encoder_states = self.encoder_states[torch.as_tensor(index, device=self.encoder_states.device)]
        return bound

    @property
    def capabilities(self) -> Capabilities:
        """What a row reads travels in its cache (row moves); attention_mask=None is the decoder's own
        causal mask; `fill_cross` knows GPT-2's `crossattention.c_attn` layout (our OCR and grounding
        models)."""
        try:
            blocks = self.model.get_submodule("decoder.transformer.h")
        except AttributeError:                 # another decoder layout: no fill_cross
            blocks = None
        fills = bool(blocks) and hasattr(blocks[0], "crossattention")
        return Capabilities(custom_mask=True, row_moves=True, plain_mask=True, fills_cross=fills)

    def fill_cross(self, cache: KVCache) -> None:
        """Compute the cross-attention K/V of `cache`'s rows now, as their first forward would, so
        they may join a running batch before a forward of their own (suite.scheduler then prefills
        them inside its next step). Needs `capabilities.fills_cross`."""
        states = cache.row_inputs["encoder_states"]
        with torch.no_grad():
            for i, block in enumerate(self.model.decoder.transformer.h):
                attn = block.crossattention
                k, v = attn.c_attn(states).split(attn.split_size, dim=2)
                shape = (*states.shape[:2], -1, attn.head_dim)
                cache.encdec.cross_attention_cache.update(k.view(shape).transpose(1, 2), v.view(shape).transpose(1, 2), i)
                cache.encdec.is_updated[i] = True

    def __call__(self, tokens, positions, cache, attention_mask, logits_from: int = 0):
        out = self.model.decoder(input_ids=tokens, position_ids=positions, cache=cache.encdec,
                                 attention_mask=attention_mask, **encoder_inputs(cache),
                                 use_cache=True, logits_to_keep=tokens.shape[1] - logits_from)
        return out.logits


def encoder_inputs(cache: KVCache) -> dict:
    """The decoder's encoder arguments from the cache's row inputs: the states, and their mask once
    rows of different encoder lengths joined (zero-padded)."""
    states = {"encoder_hidden_states": cache.row_inputs["encoder_states"]}
    if cache.inputs_padded:
        states["encoder_attention_mask"] = cache.row_inputs["encoder_mask"]
    return states


def save_tied(model: torch.nn.Module, folder: str | Path, config: dict) -> None:
    """`model`'s weights without the tied head, and `config` (indent 1), into `folder`."""
    save_weights(folder, model.state_dict(), config, indent=1, skip=(TIED_HEAD,))


def load_tied(model: torch.nn.Module, folder: str | Path) -> torch.nn.Module:
    """Load a folder written by `save_tied` into `model` (built from its config), tie the head;
    fails naming the first mismatched keys when the weights do not fit the config."""
    missing, unexpected = model.load_state_dict(load_weights(folder), strict=False)
    missing = [k for k in missing if k != TIED_HEAD]
    if missing or unexpected:
        raise ValueError(f"weights in {folder} do not match the config: missing {missing[:3]}, "
                         f"unexpected {unexpected[:3]}")
    model.decoder.tie_weights()
    return model
