"""Vision-language models of transformers (image-text-to-text) as suite ModelAdapters, through
their public forward, from a local folder saved with `save_pretrained` (processor included).

    vlm = suite.models.vlm.load_vlm("/models/paligemma")              # offline, local folder
    res = vlm.generate(image, "detect cat", decoder="lookahead", max_new_tokens=64)
    res.texts, res.tokens, res.stats

The image runs through the model's own `get_image_features` once per request; its features take
the place of the image placeholder slots of the prompt (as the model's forward splices them) on
the prefill, and every later forward is text over the cache. What a row reads besides its tokens
(its image features, prompt length, M-RoPE table or encoder states) travels in its cache, so every
`generate` is a request of the model's scheduler (suite.scheduler) and concurrent requests share
forwards: rows leave at their EOS and others join between steps. Decoder-only families (PaliGemma,
GOT-OCR2, Qwen2-VL, Kosmos-2) take `inputs_embeds`, logical `position_ids` (PaliGemma counts from
1, Kosmos-2 from its padding index + 1, Qwen2-VL's M-RoPE is the model's own `get_rope_index` over
the prompt, then text positions shifted by its delta) and suite's 4-D mask (PaliGemma: the prompt
attends to itself both ways, as its token_type_ids make it; Kosmos-2 takes a padding mask only,
so tree drafts are refused). Florence-2 is an encoder-decoder (BART): image and prompt go to the
encoder once; the decoder's learned positions follow its cache length, so the adapter adds the
difference between a slot's logical position and its cache index to the input embedding (zero,
hence exact, whenever they agree: one row, or rows that roll back together).

The folder's generation settings are honoured where they depend only on the position (forced
BOS/EOS, suppressed tokens, begin-suppressed tokens, one-token bad words, a minimum length): they
mask the logits of every slot by the position it predicts, so every decoder sees them. Settings
that depend on the history or on beams are refused, naming them, with the override that lifts
them (`load_vlm(folder, generation={...})`).
"""
from __future__ import annotations

import copy
import os
import threading
from dataclasses import dataclass

import torch

from .adapters import AdapterBase, AdapterConfig
from .capabilities import Capabilities
from ..cache import KVCache
from .encoder_decoder import causal_mask

# model_type -> (transformers class, path of its text decoder's layers for layer-truncated drafts)
FAMILIES = {
    "florence2": ("Florence2ForConditionalGeneration", ("model", "language_model", "decoder", "layers")),
    "kosmos-2": ("Kosmos2ForConditionalGeneration", ("text_model", "model", "layers")),
    "paligemma": ("PaliGemmaForConditionalGeneration", ("model", "language_model", "layers")),
    "got_ocr2": ("GotOcr2ForConditionalGeneration", ("model", "language_model", "layers")),
    "qwen2_vl": ("Qwen2VLForConditionalGeneration", ("model", "language_model", "layers")),
}
# generation settings no position-wise mask can express: setting -> its neutral value
UNSUPPORTED = {"num_beams": 1, "num_beam_groups": 1, "repetition_penalty": 1.0, "encoder_repetition_penalty": 1.0,
               "no_repeat_ngram_size": 0, "encoder_no_repeat_ngram_size": 0, "penalty_alpha": None,
               "sequence_bias": None, "exponential_decay_length_penalty": None, "force_words_ids": None,
               "constraints": None, "diversity_penalty": 0.0, "guidance_scale": None, "watermarking_config": None}


def known_families() -> str:
    return ", ".join(f"{cls} ({t})" for t, (cls, _) in FAMILIES.items())


@dataclass(frozen=True)
class GenerationRules:
    """The position-wise logits processors of a generation config. `cur_len` is the length of the
    sequence a token is appended to (transformers' own count: prompt placeholders included)."""

    eos: frozenset = frozenset()
    forced_bos: int | None = None
    forced_eos: int | None = None
    suppress: tuple = ()
    begin_suppress: tuple = ()
    bad_words: tuple = ()
    min_length: int = 0
    min_new_tokens: int = 0

    @staticmethod
    def of(gen, eos: frozenset) -> "GenerationRules":
        bad = tuple(getattr(gen, "bad_words_ids", None) or ())
        refused = [f"{k}={getattr(gen, k)!r}" for k, neutral in UNSUPPORTED.items()
                   if getattr(gen, k, None) not in (None, neutral) and not (k == "guidance_scale" and gen.guidance_scale == 1)]
        refused += [f"bad_words_ids={w!r}" for w in bad if len(w) != 1]
        if refused:
            raise ValueError(f"the folder's generation config asks for {', '.join(refused)}, which suite's decoders "
                             "cannot reproduce (they depend on the history or on beams); override them, e.g. "
                             "load(folder, generation={" + ", ".join(
                                 f"{r.split('=')[0]!r}: {UNSUPPORTED.get(r.split('=')[0])!r}" for r in refused) + "})")
        return GenerationRules(eos, getattr(gen, "forced_bos_token_id", None), getattr(gen, "forced_eos_token_id", None),
                               tuple(getattr(gen, "suppress_tokens", None) or ()),
                               tuple(getattr(gen, "begin_suppress_tokens", None) or ()),
                               tuple(w[0] for w in bad), int(getattr(gen, "min_length", 0) or 0),
                               int(getattr(gen, "min_new_tokens", 0) or 0))

    def apply(self, logits: torch.Tensor, cur_len: torch.Tensor, prompt_len: torch.Tensor,
              max_new_tokens) -> torch.Tensor:
        """logits (B, N, V) of slots whose next token extends a sequence of cur_len (B, N) tokens;
        prompt_len (B,) and max_new_tokens (an int, or (B, 1): each row's) per row."""
        low = float("-inf")
        new = cur_len - prompt_len[:, None]                          # (B, N) tokens generated so far
        begin = 1 if (prompt_len.max() == 1 and self.forced_bos is not None) else 0
        out = logits.clone()
        if self.suppress or self.bad_words:
            out[..., list(self.suppress) + list(self.bad_words)] = low
        if self.begin_suppress:
            out[..., list(self.begin_suppress)] = torch.where((new == begin)[..., None], low,
                                                             out[..., list(self.begin_suppress)])
        if self.eos and (self.min_length or self.min_new_tokens):
            early = ((cur_len < self.min_length) | (new < self.min_new_tokens))[..., None]
            out[..., list(self.eos)] = torch.where(early, low, out[..., list(self.eos)])
        for token, where in ((self.forced_bos, cur_len == 1), (self.forced_eos, new == max_new_tokens - 1)):
            if token is not None and bool(where.any()):
                forced = torch.full_like(out, low)
                forced[..., token] = 0.0
                out = torch.where(where[..., None], forced, out)
        return out

    @property
    def active(self) -> bool:
        return bool(self.forced_bos is not None or self.forced_eos is not None or self.suppress or self.begin_suppress
                    or self.bad_words or self.min_length or self.min_new_tokens)


# ---------------------------------------------------------------- the adapters

class _VLMBase(AdapterBase):
    """What a row reads besides its tokens travels in its cache (`cache.row_inputs`: its prompt
    length and token budget, its image features or encoder states), put there by an adapter bound to
    its request's batch (`VLM.adapter`); every forward reads them from the cache, so rows of
    different requests run together through the model's one adapter (suite.scheduler moves them)."""
    # a prompt is prefilled in one forward (its images at once; PaliGemma's prefix attends both ways): never in chunks
    capabilities = Capabilities(custom_mask=True, row_moves=True, whole_prompt=True)
    row_data: dict | None = None   # the row inputs of the batch this adapter is bound to (None: unbound)

    def _config(self, vlm) -> AdapterConfig:
        return AdapterConfig(vocab_size=vlm.vocab_size, eos_token_ids=vlm.eos, pad_token_id=vlm.pad,
                             max_length=vlm.max_length, extra={"family": vlm.family})

    @property
    def device(self) -> torch.device:
        return next(self.vlm.model.parameters()).device

    def _on_device(self, tokens, positions, cache, attention_mask):
        """tokens, positions (B, N) and the (B, 1, N, T) mask (causal when None) on the model's device."""
        dev = self.device
        if attention_mask is None:
            attention_mask = causal_mask(cache, tokens)
        return tokens.to(dev), positions.to(dev), attention_mask.to(dev)

    @staticmethod
    def _rows(cache, device) -> dict:
        """The cache's row inputs on the model's device."""
        return {name: t.to(device) for name, t in cache.row_inputs.items()}

    def _rules(self, logits, positions, rows):
        if not self.vlm.rules.active:
            return logits
        return self.vlm.rules.apply(logits, positions + 1, rows["prompt_len"][:, 0], rows["budget"])

    def with_model(self, model):
        """The same adapter (and binding) over another model of the family (a layer-truncated draft)."""
        twin = copy.copy(self)
        twin.model = model
        return twin

    def _bound_cache(self, batch: int, what: str) -> KVCache:
        if self.row_data is None:
            raise ValueError("bind the adapter to a batch first: vlm.adapter(vlm.inputs(images, prompts), max_new_tokens)")
        bound = len(self.row_data["prompt_len"])
        if batch != bound:
            raise ValueError(f"this adapter is bound to {bound} {what}, not {batch}")
        cache = KVCache(batch, device=self.device)
        cache.row_inputs.update(self.row_data)
        return cache

    def _bound(self, data: dict, prompt_lengths: list[int], max_new_tokens: int):
        """This adapter bound to a batch: `data` plus each row's prompt length and token budget."""
        dev = self.device
        bound = copy.copy(self)
        bound.row_data = {**data, "prompt_len": torch.tensor(prompt_lengths, device=dev)[:, None],
                          "budget": torch.full((len(prompt_lengths), 1), max_new_tokens, device=dev)}
        return bound


class VLMAdapter(_VLMBase):
    """A decoder-only VLM. Bound to a batch (`for_prompts`), each row's cache carries its image
    features at its prompt's image slots ("image_embeds" (B, P, D), "image_mask" (B, P)) and, for
    Qwen2-VL, its M-RoPE positions ("rope_table" (B, P, 3), "rope_delta" (B, 1))."""

    def __init__(self, vlm, model=None):
        self.vlm, self.model = vlm, model if model is not None else vlm.model
        self.config = self._config(vlm)
        self.capabilities = Capabilities(custom_mask=vlm.family != "kosmos-2", row_moves=True, whole_prompt=True)

    def for_prompts(self, rows, image_slots, features, max_new_tokens: int, rope=None) -> "VLMAdapter":
        """Bound to prompts `rows` (ids, unpadded), their image features (M, D) in the order of the
        rows' image slots (`image_slots`: per row, the prompt positions that take a feature) and
        Qwen2-VL's rope ((3, B, P), (B,))."""
        if sum(len(pos) for pos in image_slots) != len(features):
            raise ValueError(f"the prompts hold {sum(len(pos) for pos in image_slots)} image placeholders but the "
                             f"images gave {len(features)} features: build the prompts with the folder's processor")
        p, dev = max(len(r) for r in rows), self.device
        embeds = torch.zeros(len(rows), p, features.shape[-1], dtype=features.dtype, device=dev)
        placed = torch.zeros(len(rows), p, dtype=torch.bool, device=dev)
        start = 0
        for b, pos in enumerate(image_slots):
            where = torch.tensor(pos, dtype=torch.long, device=dev)
            embeds[b, where] = features[start:start + len(pos)].to(dev)
            placed[b, where] = True
            start += len(pos)
        data = {"image_embeds": embeds, "image_mask": placed}
        if rope is not None:
            table, delta = rope
            data.update(rope_table=table.permute(1, 2, 0).to(dev), rope_delta=delta.to(dev)[:, None])
        return self._bound(data, [len(r) for r in rows], max_new_tokens)

    def new_cache(self, batch: int, max_len: int | None = None) -> KVCache:
        return self._bound_cache(batch, "prompts")

    def _embeds(self, tokens, positions, rows):
        embed = self.model.get_input_embeddings()
        embeds = embed(torch.where(tokens < embed.num_embeddings, tokens, 0))
        at = positions.clamp(max=rows["image_mask"].shape[1] - 1)
        image = rows["image_mask"].gather(1, at) & (positions < rows["prompt_len"])          # (B, N)
        feats = rows["image_embeds"].gather(1, at[..., None].expand(-1, -1, embeds.shape[-1]))
        return torch.where(image[..., None], feats.to(embeds.dtype), embeds)      # no host sync

    def _positions(self, positions, rows):
        family = self.vlm.family
        if family == "paligemma":
            return positions + 1
        if family == "kosmos-2":
            return positions + self.model.text_model.model.embed_positions.padding_idx + 1
        if family == "qwen2_vl":
            table = rows["rope_table"]                                                     # (B, P, 3)
            looked = table.gather(1, positions.clamp(max=table.shape[1] - 1)[..., None].expand(-1, -1, 3))
            inside = (positions < rows["prompt_len"])[..., None]
            return torch.where(inside, looked, (positions + rows["rope_delta"])[..., None]).permute(2, 0, 1)
        return positions

    def _mask(self, mask, positions, rows):
        if self.vlm.family == "paligemma" and bool((positions[:, 0] == 0).any()):
            # the prefill: the prompt (image + text prefix) attends both ways
            n, t = mask.shape[-2:]
            slot = torch.arange(n, device=mask.device)
            prefix = (slot[None] < rows["prompt_len"]) & (positions[:, :1] == 0)          # (B, N)
            both = prefix[:, :, None] & prefix[:, None, :]
            mask = mask.clone()
            mask[:, 0, :, t - n:] |= both
        if self.vlm.family == "kosmos-2":
            return padding_mask(mask)
        return mask

    def __call__(self, tokens, positions, cache, attention_mask, logits_from: int = 0):
        tokens, positions, mask = self._on_device(tokens, positions, cache, attention_mask)
        rows = self._rows(cache, tokens.device)
        mask = self._mask(mask, positions, rows)
        keep = tokens.shape[1] - logits_from
        kw = dict(inputs_embeds=self._embeds(tokens, positions, rows), position_ids=self._positions(positions, rows),
                  attention_mask=mask, cache=cache.backend, use_cache=True, logits_to_keep=keep)
        out = self.model.text_model(**kw) if self.vlm.family == "kosmos-2" else self.model(**kw)
        return self._rules(out.logits, positions[:, logits_from:], rows)


def padding_mask(mask: torch.Tensor) -> torch.Tensor:
    """(B, 1, N, T) bool -> (B, T) long, for a model that takes only a padding mask (Kosmos-2).
    Valid for chain drafts: every real slot sees the live past and the draft before it, padding
    slots see themselves only; tree drafts are refused."""
    n, t = mask.shape[-2:]
    past, draft = mask[:, 0, :, :t - n], mask[:, 0, :, t - n:]
    causal = torch.ones(n, n, dtype=torch.bool, device=mask.device).tril()
    alone = (draft == torch.eye(n, dtype=torch.bool, device=mask.device)).all(-1)           # (B, N) padding
    live = past.any(1)                                                                       # (B, S)
    chain = (draft == causal).all(-1) & (past == live[:, None]).all(-1)
    if not bool((chain | alone).all()):
        raise ValueError("Kosmos-2's text model takes a padding mask only: tree-shaped drafts (lookahead) cannot "
                         "run on it; use decoder='ar', 'ngram', 'jacobi' or 'speculative'")
    return torch.cat([live, torch.ones_like(draft[:, 0])], 1).long()


class Seq2SeqVLMAdapter(_VLMBase):
    """Florence-2: image and prompt through the encoder once per request (bound: each row's cache
    carries its "encoder_states" (B, S, D) and "encoder_mask" (B, S)), the BART decoder over suite's
    cache (self-attention) and the cross-attention K/V filled on a row's first forward."""

    def __init__(self, vlm, model=None):
        self.vlm, self.model = vlm, model if model is not None else vlm.model
        self.config = self._config(vlm)

    def for_states(self, encoder_states, encoder_mask, max_new_tokens: int) -> "Seq2SeqVLMAdapter":
        return self._bound({"encoder_states": encoder_states, "encoder_mask": encoder_mask},
                           [1] * len(encoder_states), max_new_tokens)

    def new_cache(self, batch: int, max_len: int | None = None) -> KVCache:
        from transformers import DynamicCache, EncoderDecoderCache
        cache = self._bound_cache(batch, "images")
        cache.encdec = EncoderDecoderCache(cache.backend, DynamicCache())
        return cache

    def __call__(self, tokens, positions, cache, attention_mask, logits_from: int = 0):
        tokens, positions, mask = self._on_device(tokens, positions, cache, attention_mask)
        dev = tokens.device
        decoder = self.model.model.language_model.decoder
        table = decoder.embed_positions
        slots = torch.arange(tokens.shape[1], device=dev)[None] + cache.backend.get_seq_length()
        shift = table.weight[positions + table.offset] - table.weight[slots + table.offset]   # (B, N, D)
        embeds = decoder.embed_tokens(tokens) + shift
        rows = self._rows(cache, dev)
        hidden = decoder(inputs_embeds=embeds, attention_mask=mask, encoder_hidden_states=rows["encoder_states"],
                         encoder_attention_mask=rows["encoder_mask"], cache=cache.encdec, use_cache=True).last_hidden_state
        return self._rules(self.model.lm_head(hidden[:, logits_from:]), positions[:, logits_from:], rows)


# ---------------------------------------------------------------- the loaded model

@dataclass
class VLMResult:
    texts: list[str]
    tokens: list[list[int]]          # new tokens per row (EOS included when reached)
    stats: object
    settings: dict


class VLM:
    """A loaded image-text-to-text model with its processor: images + prompts in, text out."""

    def __init__(self, model, processor, family: str, folder: str = ""):
        self.model, self.processor, self.family, self.folder = model.eval(), processor, family, folder
        gen = model.generation_config
        cfg = model.config.get_text_config()
        eos = gen.eos_token_id if gen.eos_token_id is not None else cfg.eos_token_id
        self.eos = frozenset([eos] if isinstance(eos, int) else (eos or ()))
        pad = gen.pad_token_id if gen.pad_token_id is not None else cfg.pad_token_id
        self.pad = int(pad if pad is not None else min(self.eos, default=0))
        self.vocab_size = model.get_output_embeddings().weight.shape[0]
        self.max_length = getattr(cfg, "max_position_embeddings", None)
        self.rules = GenerationRules.of(gen, self.eos)
        self._scheduler = None
        self._lock = threading.Lock()

    @property
    def scheduler(self):
        """The model's stepping thread (suite.scheduler), made on first use: every `generate` is a
        request of it, so concurrent callers share forwards."""
        from ..scheduler import Scheduler
        with self._lock:
            if self._scheduler is None:
                unbound = Seq2SeqVLMAdapter(self) if self.family == "florence2" else VLMAdapter(self)
                self._scheduler = Scheduler(unbound, name=f"parasuite-vlm-{self.family}")
            return self._scheduler

    @property
    def tokenizer(self):
        return self.processor.tokenizer

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def inputs(self, images, prompts):
        """The processor's batch for images and prompts (one image per prompt)."""
        images = images if isinstance(images, (list, tuple)) else [images]
        prompts = [prompts] * len(images) if isinstance(prompts, str) else list(prompts)
        if len(prompts) != len(images):
            raise ValueError(f"{len(images)} images but {len(prompts)} prompts: give one prompt per image")
        kw = {"padding": True} if len(prompts) > 1 else {}
        return self.processor(images=list(images), text=prompts, return_tensors="pt", **kw).to(self.device)

    def prompt_rows(self, batch) -> list[list[int]]:
        ids, keep = batch["input_ids"], batch["attention_mask"].bool()
        return [ids[b][keep[b]].tolist() for b in range(len(ids))]

    @torch.no_grad()
    def adapter(self, batch, max_new_tokens: int, model=None):
        """The suite adapter bound to a processor batch (images encoded once, here)."""
        m = self.model
        if self.family == "florence2":
            feats = m.model.get_image_features(batch["pixel_values"]).pooler_output
            embeds = m.model.get_input_embeddings()(batch["input_ids"])
            slots = m.model.get_placeholder_mask(batch["input_ids"], inputs_embeds=embeds, image_features=feats)
            embeds = embeds.masked_scatter(slots, feats.to(embeds.dtype))
            states = m.model.language_model.encoder(inputs_embeds=embeds,
                                                    attention_mask=batch["attention_mask"]).last_hidden_state
            return Seq2SeqVLMAdapter(self, model).for_states(states, batch["attention_mask"], max_new_tokens)
        rows = self.prompt_rows(batch)
        keep = batch["attention_mask"].bool()
        if self.family == "kosmos-2":
            feats = m.get_image_features(batch["pixel_values"]).pooler_output
            placed = batch["image_embeds_position_mask"].bool()
        else:
            extra = {"image_grid_thw": batch["image_grid_thw"]} if "image_grid_thw" in batch else {}
            out = m.get_image_features(batch["pixel_values"], **extra).pooler_output
            feats = torch.cat(list(out)) if isinstance(out, (list, tuple)) else out
            placed = batch["input_ids"] == m.config.image_token_id
        feats = feats.reshape(-1, feats.shape[-1])
        slots = [placed[b][keep[b]].nonzero().flatten().tolist() for b in range(len(rows))]
        rope = self._rope(batch, rows) if self.family == "qwen2_vl" else None
        return VLMAdapter(self, model).for_prompts(rows, slots, feats, max_new_tokens, rope)

    def _rope(self, batch, rows):
        """Qwen2-VL's M-RoPE positions of each unpadded prompt (3, B, P) and the text shift (B,)."""
        p = max(len(r) for r in rows)
        table = torch.zeros(3, len(rows), p, dtype=torch.long, device=self.device)
        delta = torch.zeros(len(rows), dtype=torch.long, device=self.device)
        grids = batch["image_grid_thw"]
        per_row = (batch["input_ids"] == self.model.config.vision_start_token_id).sum(1).tolist()
        start = 0
        for b, r in enumerate(rows):
            ids = torch.tensor([r], device=self.device)
            types = batch["mm_token_type_ids"][b][batch["attention_mask"][b].bool()][None]
            pos, d = self.model.model.get_rope_index(ids, mm_token_type_ids=types,
                                                     image_grid_thw=grids[start:start + per_row[b]])
            start += per_row[b]
            table[:, b, :len(r)], delta[b] = pos[:, 0].to(table.device), int(d.flatten()[0])
        return table, delta

    def truncated(self, num_layers: int):
        """The model with the first `num_layers` layers of its text decoder (shared weights): a
        self-speculative draft (Draft & Verify)."""
        path = FAMILIES[self.family][1]
        layers = self.model
        for name in path:
            layers = getattr(layers, name)
        if not 1 <= num_layers < len(layers):
            raise ValueError(f"draft='self:{num_layers}' needs 1 <= N < {len(layers)} (the text decoder's layer count)")
        return _with_layers(self.model, path, torch.nn.ModuleList(list(layers)[:num_layers]))

    def generate(self, images, prompts, decoder="ar", max_new_tokens: int = 64, temperature: float = 0.0,
                 top_k=None, top_p=None, seed=None, batch=None, **options) -> VLMResult:
        """Decode the answers to `prompts` about `images` with any chain decoder; speculative
        takes draft='self:N' (the first N text layers) or draft_model= (a VLM of the family)."""
        request = self.submit(images, prompts, decoder, max_new_tokens, temperature, top_k, top_p, seed, batch,
                              **options)
        res = request.result()
        texts = self.tokenizer.batch_decode(res.new_tokens, skip_special_tokens=False)
        settings = {"family": self.family, "decoder": request.decoder.name, "max_new_tokens": max_new_tokens,
                    "temperature": temperature, "seed": seed}
        return VLMResult(texts, res.new_tokens, res.stats, settings)

    def submit(self, images, prompts, decoder="ar", max_new_tokens: int = 64, temperature: float = 0.0,
               top_k=None, top_p=None, seed=None, batch=None, stream: bool = False, **options):
        """`generate`'s request, queued on the model's scheduler (its images encoded here, in the
        caller's thread): a suite.scheduler.Request (steps(), result(), cancel()). Concurrent
        requests share forwards; each gets the tokens it would get alone."""
        batch = batch if batch is not None else self.inputs(images, prompts)
        adapter = self.adapter(batch, max_new_tokens)
        options = self._draft(adapter, batch, max_new_tokens, options)
        rows = [[self.model.generation_config.decoder_start_token_id or self.model.config.get_text_config()
                 .decoder_start_token_id]] * len(batch["input_ids"]) if self.family == "florence2" else self.prompt_rows(batch)
        return self.scheduler.submit(rows, decoder=decoder, max_new_tokens=max_new_tokens, temperature=temperature,
                                     top_k=top_k, top_p=top_p, seed=seed, stream=stream, bound=adapter, **options)

    def _draft(self, adapter, batch, max_new_tokens, options):
        draft = options.get("draft")
        if isinstance(draft, str) and draft.startswith("self:") and draft[5:].isdigit():
            options = {k: v for k, v in options.items() if k != "draft"}
            options["draft_model"] = adapter.with_model(self.truncated(int(draft[5:])))
        elif isinstance(options.get("draft_model"), VLM):
            options["draft_model"] = options["draft_model"].adapter(batch, max_new_tokens)
        return options

    @torch.no_grad()
    def reference(self, images, prompts, max_new_tokens: int = 64, batch=None) -> list[list[int]]:
        """The family's own greedy `generate` (the oracle the tests hold every decoder to): new
        tokens per row, cut after the first EOS."""
        batch = batch if batch is not None else self.inputs(images, prompts)
        out = self.model.generate(**batch, do_sample=False, max_new_tokens=max_new_tokens)
        start = 1 if self.family == "florence2" else batch["input_ids"].shape[1]
        rows = []
        for seq in out[:, start:].tolist():
            cut = next((i + 1 for i, t in enumerate(seq) if t in self.eos), len(seq))
            rows.append(seq[:cut])
        return rows


def _with_layers(module, path, layers):
    """A shallow copy of `module` whose submodule at `path` is `layers` (the rest shared)."""
    twin = copy.copy(module)
    twin._modules = dict(module._modules)
    twin._modules[path[0]] = layers if len(path) == 1 else _with_layers(getattr(module, path[0]), path[1:], layers)
    return twin


def load_vlm(folder, device: str | None = None, generation: dict | None = None) -> VLM:
    """An image-text-to-text checkpoint (Florence-2, Kosmos-2, PaliGemma, GOT-OCR2, Qwen2-VL) and its
    processor from a local folder (never the hub); `generation` overrides generation-config fields."""
    import transformers
    folder = str(folder)
    if not os.path.isdir(folder):
        raise ValueError(f"{folder} is not a folder: pass a local model folder saved with save_pretrained")
    family = vlm_family(folder)
    if family not in FAMILIES:
        raise ValueError(f"{folder} holds a {family!r} model, not a vision-language family suite knows; "
                         f"known: {known_families()}")
    try:
        processor = transformers.AutoProcessor.from_pretrained(folder, local_files_only=True)
    except Exception as e:
        raise ValueError(f"{folder} has no usable processor ({type(e).__name__}: {e}); save the model's "
                         "processor (tokenizer + image processor) beside it: processor.save_pretrained(folder)") from None
    if not hasattr(processor, "tokenizer") or not hasattr(processor, "image_processor"):
        raise ValueError(f"{folder} has a {type(processor).__name__}, not a processor with a tokenizer and an image "
                         "processor; save the model's processor beside it: processor.save_pretrained(folder)")
    model = getattr(transformers, FAMILIES[family][0]).from_pretrained(folder, local_files_only=True)
    for key, value in (generation or {}).items():
        setattr(model.generation_config, key, value)
    return VLM(model.to(device) if device else model, processor, family, folder)


def vlm_family(folder) -> str | None:
    """The model_type of a folder's config.json, or None when it has none."""
    from ..runtime.storage import read_json
    path = os.path.join(str(folder), "config.json")
    if not os.path.isfile(path):
        raise ValueError(f"{folder} has no config.json: pass a model folder saved with save_pretrained")
    return read_json(path).get("model_type")
