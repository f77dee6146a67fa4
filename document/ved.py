"""transformers VisionEncoderDecoder checkpoints (TrOCR and the like) as line readers.

`document.load_ocr(folder)` loads a `VisionEncoderDecoderModel` saved with its tokenizer and
image processor (`save_pretrained`), offline, and reads lines with any suite decoder through
`VEDAdapter`: the image encoder runs once per batch, the decoder's self-attention K/V lives in
suite's KVCache (cross-attention K/V is computed once per request), exactly like our own model.

Positions: suite passes each slot's logical position. Decoders whose forward takes
`position_ids` (GPT-2, BERT, RoBERTa, ...) get them. TrOCR's decoder derives positions from the
cache length instead (slots + arange), which differs from the logical positions once rejected
drafts leave holes in the cache or rows are ragged; with learned position embeddings we pass
`inputs_embeds = tokens + P[position] - P[cache length + i]`, so the sum the decoder forms is
token + P[position] (no patching of transformers). Masks are passed as 4-D additive float masks,
which every attention implementation (TrOCR's eager one included) takes as is.

A checkpoint not trained with a block-diffusion objective runs `ar` and the lossless decoders
(s2d2, ngram_prior, jacobi) with `ar`'s output; `block_diffusion` drafts from it are poor.
"""
from __future__ import annotations

import inspect
from pathlib import Path

import torch

from suite import AdapterConfig
from suite.models.encoder_decoder import CrossAttentionAdapter, causal_mask, encoder_inputs


class VEDAdapter(CrossAttentionAdapter):
    """suite.ModelAdapter and line reader over a VisionEncoderDecoderModel (see the module notes)."""

    def __init__(self, model, tokenizer, processor, encoder_states: torch.Tensor | None = None):
        self.model, self.tokenizer, self.processor = model.eval(), tokenizer, processor
        self.encoder_states = encoder_states                  # (B, S, D) or None (unbound)
        cfg, dec = model.config, model.decoder.config
        gen = getattr(model, "generation_config", None)
        self.start_token_id = _first(cfg.decoder_start_token_id, getattr(gen, "decoder_start_token_id", None),
                                     dec.bos_token_id, tokenizer.bos_token_id)
        eos = _first(getattr(gen, "eos_token_id", None), cfg.eos_token_id, dec.eos_token_id, tokenizer.eos_token_id)
        if self.start_token_id is None or eos is None:
            raise ValueError("the checkpoint names no decoder start or EOS token: set decoder_start_token_id and "
                             "eos_token_id in its config.json")
        eos_ids = frozenset(eos if isinstance(eos, (list, tuple)) else [eos])
        max_pos = getattr(dec, "max_position_embeddings", None) or getattr(dec, "n_positions", None) or 512
        max_len = min(max_pos, getattr(gen, "max_length", None) or max_pos)
        pad = _first(cfg.pad_token_id, dec.pad_token_id, tokenizer.pad_token_id, 0)
        self.config = AdapterConfig(vocab_size=dec.vocab_size, eos_token_ids=eos_ids, pad_token_id=pad,
                                    max_length=max_len, extra={"mask_token_id": tokenizer.mask_token_id,
                                                               "bos_token_id": self.start_token_id})
        self._takes_positions = "position_ids" in inspect.signature(model.decoder.forward).parameters
        if not self._takes_positions:
            _slot_headroom(model.decoder, max_pos)


    @classmethod
    def load(cls, folder: str | Path) -> "VEDAdapter":
        from transformers import AutoImageProcessor, AutoTokenizer, VisionEncoderDecoderModel
        folder = str(folder)
        try:
            model = VisionEncoderDecoderModel.from_pretrained(folder, local_files_only=True)
            tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
            processor = AutoImageProcessor.from_pretrained(folder, local_files_only=True)
        except (OSError, ValueError) as e:
            raise ValueError(f"{folder}: not a loadable VisionEncoderDecoder checkpoint ({e}); it needs the model, "
                             "its tokenizer and its image processor, all saved with save_pretrained") from None
        return cls(model, tokenizer, processor)

    @property
    def device(self) -> torch.device:
        return self.model.device

    def cost_identity(self) -> list[str]:
        """suite.cost's key for this checkpoint: its class, config, dtype, device."""
        return [type(self.model).__name__, self.model.config.to_json_string(use_diff=False), str(self.model.dtype),
                str(self.device)]

    # ---- the line-reader interface (see document.model.OCRAdapter) ---------------------------

    def pixels(self, images) -> torch.Tensor:
        return self.processor(images=[im.convert("RGB") for im in images], return_tensors="pt").pixel_values

    def decode_text(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True).strip()

    def prior_tokens(self, text: str) -> list[int]:
        return [self.start_token_id] + self.tokenizer(text, add_special_tokens=False).input_ids

    def for_images(self, pixels: torch.Tensor) -> "VEDAdapter":
        """pixels (B, C, H, W) from `pixels` -> an adapter holding their encoder states."""
        m = self.model
        with torch.no_grad():
            states = m.encoder(pixel_values=pixels.to(m.device, m.dtype)).last_hidden_state
            if (m.encoder.config.hidden_size != m.decoder.config.hidden_size
                    and m.decoder.config.cross_attention_hidden_size is None):
                states = m.enc_to_dec_proj(states)          # as VisionEncoderDecoderModel.forward does
        bound = VEDAdapter.__new__(VEDAdapter)
        bound.__dict__.update(self.__dict__, encoder_states=states)
        return bound

    # ---- suite.ModelAdapter (new_cache: CrossAttentionAdapter's) ------------------------------

    def __call__(self, tokens, positions, cache, attention_mask, logits_from: int = 0):
        if attention_mask is None:
            attention_mask = causal_mask(cache, tokens)
        dtype = self.model.dtype
        additive = torch.zeros(attention_mask.shape, dtype=dtype, device=attention_mask.device).masked_fill(
            ~attention_mask, torch.finfo(dtype).min)
        kwargs = dict(attention_mask=additive, cache=cache.encdec, use_cache=True, **encoder_inputs(cache))
        if self._takes_positions:
            kwargs.update(input_ids=tokens, position_ids=positions)
        else:
            kwargs.update(inputs_embeds=self._embeds_at(tokens, positions, cache.backend.get_seq_length()))
        logits = self.model.decoder(**kwargs).logits
        return logits[:, logits_from:]

    def _embeds_at(self, tokens, positions, cache_length: int) -> torch.Tensor:
        """Token embeddings corrected so that the decoder's own position embedding (at
        cache_length + i) becomes the one at the logical position."""
        inner = self.model.decoder.get_decoder() if hasattr(self.model.decoder, "get_decoder") else self.model.decoder
        table = getattr(inner, "embed_positions", None)
        if not isinstance(table, torch.nn.Embedding) or not getattr(inner.config, "use_learned_position_embeddings", True):
            raise ValueError(f"{type(self.model.decoder).__name__} takes no position_ids and has no learned position "
                             "table to correct; decode it with a decoder whose drafts stay contiguous in a full batch")
        offset = getattr(table, "offset", 0)
        own = torch.arange(cache_length, cache_length + tokens.shape[1], device=tokens.device).expand_as(tokens)
        if int(own.max()) + offset >= table.num_embeddings:
            raise ValueError(f"a step reaches cache slot {int(own.max())}, past the decoder's position table "
                             f"({table.num_embeddings - offset} rows with headroom): read shorter lines or smaller "
                             "batches")
        return inner.embed_tokens(tokens) + table.weight[positions + offset] - table.weight[own + offset]


def _slot_headroom(decoder, rows: int) -> None:
    """A decoder without position_ids indexes its learned position table by cache slot, and a batch's
    dead slots and a wide draft reach past the logical positions (`_embeds_at` corrects each slot to its
    logical one): `rows` zero rows appended to the table give the slots room (a zero row adds nothing, so
    the correction there is exact)."""
    inner = decoder.get_decoder() if hasattr(decoder, "get_decoder") else decoder
    table = getattr(inner, "embed_positions", None)
    if not isinstance(table, torch.nn.Embedding) or getattr(table, "slot_headroom", False):
        return
    zeros = table.weight.new_zeros(rows, table.weight.shape[1])
    table.weight = torch.nn.Parameter(torch.cat([table.weight.detach(), zeros]), requires_grad=False)
    table.num_embeddings += rows
    table.slot_headroom = True


def _first(*values):
    for v in values:
        if v is not None:
            return v
    return None
