"""A VLM family: what differs between the transformers image-text-to-text classes, behind the one
adapter (suite.models.vlm.adapter). A family encodes a request's images once (`bind`: the row
inputs its rows carry in the cache), says where decoding starts (`start_rows`) and runs a forward
over suite's cache (`logits`). Decoder-only families share `DecoderOnly`
(suite.models.vlm.decoder_only); Florence-2 is an encoder-decoder (suite.models.vlm.florence2)."""
from __future__ import annotations

import torch


class Family:
    model_type: str = ""               # config.json's model_type
    model_class: str = ""              # the transformers class that loads it
    layers: tuple[str, ...] = ()       # path of its text decoder's layers (layer-truncated drafts)
    custom_mask: bool = True           # takes suite's 4-D mask (tree drafts)
    rows_are: str = "prompts"          # what one row of a bound batch is, in messages
    chat_template: bool = False        # a chat model: a prompt is one image turn of its chat template

    def bind(self, vlm, batch, max_new_tokens: int, model=None):
        """The adapter (suite.models.vlm.adapter.VLMAdapter) bound to a processor batch, its images
        encoded here, once; `model` is the model it runs (default the VLM's; a draft's)."""
        raise NotImplementedError

    def start_rows(self, vlm, batch) -> list[list[int]]:
        """The token rows decoding continues from: the unpadded prompts."""
        return vlm.prompt_rows(batch)

    def reference_start(self, batch) -> int:
        """Where the new tokens start in the rows the model's own `generate` returns."""
        return batch["input_ids"].shape[1]

    def prepare_cache(self, cache) -> None:
        """Whatever a new cache needs besides its row inputs (nothing, by default)."""

    def logits(self, model, tokens: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor, cache, rows: dict,
               logits_from: int) -> torch.Tensor:
        """(B, N - logits_from, V) logits of tokens at logical `positions` (B, N) under the (B, 1, N, T)
        `mask`, over suite's `cache`, with the rows' inputs `rows` on the model's device."""
        raise NotImplementedError
