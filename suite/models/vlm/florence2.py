"""Florence-2: an encoder-decoder (BART). Image and prompt go through the encoder once per request
(bound: each row's cache carries its "encoder_states" (B, S, D) and "encoder_mask" (B, S)); the
decoder runs over suite's cache (self-attention), its cross-attention K/V filled on a row's first
forward. The decoder's learned positions follow its cache length, so the adapter adds the difference
between a slot's logical position and its cache index to the input embedding (zero, hence exact,
whenever they agree: one row, or rows that roll back together)."""
from __future__ import annotations

import torch

from .adapter import VLMAdapter
from .family import Family


class Florence2(Family):
    model_type, model_class = "florence2", "Florence2ForConditionalGeneration"
    layers = ("model", "language_model", "decoder", "layers")
    rows_are = "images"

    def bind(self, vlm, batch, max_new_tokens: int, model=None) -> VLMAdapter:
        m = vlm.model
        feats = m.model.get_image_features(batch["pixel_values"]).pooler_output
        embeds = m.model.get_input_embeddings()(batch["input_ids"])
        slots = m.model.get_placeholder_mask(batch["input_ids"], inputs_embeds=embeds, image_features=feats)
        embeds = embeds.masked_scatter(slots, feats.to(embeds.dtype))
        states = m.model.language_model.encoder(inputs_embeds=embeds,
                                                attention_mask=batch["attention_mask"]).last_hidden_state
        return VLMAdapter(vlm, model).bound({"encoder_states": states, "encoder_mask": batch["attention_mask"]},
                                            [1] * len(states), max_new_tokens)

    def start_rows(self, vlm, batch) -> list[list[int]]:
        """One decoder start token per row."""
        start = vlm.model.generation_config.decoder_start_token_id or \
            vlm.model.config.get_text_config().decoder_start_token_id
        return [[start]] * len(batch["input_ids"])

    def reference_start(self, batch) -> int:
        return 1

    def prepare_cache(self, cache) -> None:
        from transformers import DynamicCache, EncoderDecoderCache
        cache.encdec = EncoderDecoderCache(cache.backend, DynamicCache())

    def logits(self, model, tokens, positions, mask, cache, rows, logits_from):
        decoder = model.model.language_model.decoder
        table = decoder.embed_positions
        slots = torch.arange(tokens.shape[1], device=tokens.device)[None] + cache.backend.get_seq_length()
        shift = table.weight[positions + table.offset] - table.weight[slots + table.offset]   # (B, N, D)
        embeds = decoder.embed_tokens(tokens) + shift
        hidden = decoder(inputs_embeds=embeds, attention_mask=mask, encoder_hidden_states=rows["encoder_states"],
                         encoder_attention_mask=rows["encoder_mask"], cache=cache.encdec, use_cache=True).last_hidden_state
        return model.lm_head(hidden[:, logits_from:])
