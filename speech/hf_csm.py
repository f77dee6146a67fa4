"""CSM checkpoints (transformers `CsmForConditionalGeneration`; Sesame 2025, "Conversational Speech
Model": a Llama backbone over text and Mimi frames, and a small depth decoder over the codebooks of a
frame) as text-to-speech pipelines, decoded by suite's `local_ar` (frames/local_ar.py).

    tts = speech.load_tts("csm-folder")      # model (Mimi codec inside) + processor, save_pretrained
    res = tts("[0]Hello there.", decoder="local_ar", seconds=3)
    res.audio, res.sample_rate, res.codes, res.stats

One backbone forward per frame (prefill included) gives h_t; codebook 0 is read from the backbone's
head (`lm_head(h_t)`), codebooks 1..Q-1 from the depth decoder run on [h_t, c_0, ..., c_{q-1}]: CSM's
own factorisation, which is `local_ar`'s. The depth decoder runs without a cache here (Q - 1 passes
over at most Q slots per frame; CSM's generate caches them): the same logits, more depth compute.

The text prompt rides in the prompt frames: a text token t is the frame (t, M, ..., M), M an id no
codebook has, and the adapter embeds such frames with CSM's text embedding (so ragged batches of texts
need no padding). CSM ends a row with the first frame whose codebooks 0..Q-2 all hold
`codebook_eos_token_id` (that frame is kept, as CSM's generate keeps it); the audio stops before the
first frame that is all EOS ids, as CSM's `output_audio` cuts it. Its Mimi codec decodes the audio.

Decoders: `local_ar` (exact: greedy equals `model.generate` token for token). `delay`, `parallel`,
`stack` need heads over all codebooks (the backbone predicts codebook 0 only) and `local_maskgit` a
bidirectional local transformer (CSM's depth decoder is causal): refused by name. Sampling follows
the generation config when the backbone's and the depth decoder's settings agree (suite's `local_ar`
samples every codebook with one setting), else a call's temperature must choose; settings the
adapter cannot honour are refused by name. An audio context (voice prompt) is not supported yet.
"""
from __future__ import annotations

import time

import numpy as np
import torch

from suite import AdapterConfig
from suite.cache import KVCache

from .hf_folder import GENERATE_DEFAULTS, load_family, refuse_settings
from suite.models.adapters import AdapterBase
from suite.models.capabilities import Capabilities

FAMILIES = {"csm": ("CsmForConditionalGeneration", "CsmProcessor")}
DECODERS = ("local_ar",)
LACKING = {"delay": "heads over every codebook of a frame (CSM's backbone predicts codebook 0 only)",
           "parallel": "heads over every codebook of a frame (CSM's backbone predicts codebook 0 only)",
           "stack": "stacked heads over two frames", "stack_local": "stacked heads over two frames",
           "flat": "a flattened-codes model",
           "local_maskgit": "a bidirectional local transformer (CSM's depth decoder is causal)"}
UNKNOWN = -1                      # a codebook slot the local transformer has not decided yet
SAMPLING = ("do_sample", "temperature", "top_k", "top_p")


class CsmAdapter(AdapterBase):
    """suite.ModelAdapter over CSM's backbone: frames (B, N, Q) (text tokens as (t, M, ..., M)) at any
    positions -> LocalHeadOutput(h (B, N', D), local = lm_head + depth decoder)."""

    capabilities = Capabilities(custom_mask=True)

    def __init__(self, model):
        self.model = model.eval()
        cfg = model.config
        self.codebooks, self.vocab = cfg.num_codebooks, cfg.vocab_size
        if self.codebooks < 2:
            raise ValueError(f"CSM with {self.codebooks} codebook has no depth decoder to run; use Q >= 2")
        self.text_mark = self.vocab + 1                    # marks a prompt frame holding a text token
        self.end_id = cfg.codebook_eos_token_id
        never = self.vocab                                 # suite's EOS id: no head emits it (CSM ends by a frame)
        ends = frozenset((self.end_id,) * (self.codebooks - 1) + (x,) for x in range(self.vocab))
        self.config = AdapterConfig(vocab_size=self.vocab + 1, eos_token_ids=ends,
                                    pad_token_id=cfg.codebook_pad_token_id, max_length=cfg.max_position_embeddings,
                                    extra={"codebooks": self.codebooks, "bos": cfg.codebook_pad_token_id, "eos": never,
                                           "pad": cfg.codebook_pad_token_id, "output": "local"})

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def prompt(self, text_ids: list[int]) -> list[tuple]:
        """A row's text tokens as prompt frames (t, M, ..., M)."""
        return [(t,) + (self.text_mark,) * (self.codebooks - 1) for t in text_ids]

    def new_cache(self, batch: int, max_len: int | None = None) -> KVCache:
        return KVCache(batch, device=self.device)

    def __call__(self, tokens, positions, cache, attention_mask, logits_from: int = 0):
        from suite.decoders.frames.base import LocalHeadOutput
        from suite.models.encoder_decoder import causal_mask
        m, dev = self.model, self.device
        tokens, positions = tokens.to(dev), positions.to(dev)
        if attention_mask is None:
            attention_mask = causal_mask(cache, tokens)
        is_text = tokens[..., 1] == self.text_mark                                      # (B, N)
        audio = m.backbone_model.embed_tokens(tokens.masked_fill(is_text[..., None], 0))  # (B, N, D)
        text = m.embed_text_tokens(tokens[..., 0].masked_fill(~is_text, 0))
        embeds = torch.where(is_text[..., None], text, audio)
        hidden = m.backbone_model(inputs_embeds=embeds, position_ids=positions, attention_mask=attention_mask.to(dev),
                                  cache=cache.backend, use_cache=True).last_hidden_state[:, logits_from:]
        return LocalHeadOutput(hidden=hidden, local=self.local, mask_id=UNKNOWN)

    def local(self, h: torch.Tensor, codes: torch.Tensor, mode: str) -> torch.Tensor:
        """h (M, D), codes (M, Q) known up to n -> logits (M, Q, V+1): codebook 0 from the backbone's
        head, codebooks 1..n from the depth decoder over [h, c_0, ..., c_{n-1}]; the rest zeros."""
        if mode != "ar":
            raise ValueError(f"CSM's depth decoder is causal: it runs local_ar, not {mode!r}")
        m = self.model
        codes = codes.to(h.device)
        n = min(int((codes != UNKNOWN).all(0).int().cumprod(0).sum()), self.codebooks - 1)
        out = torch.zeros(h.shape[0], self.codebooks, self.vocab + 1, device=h.device, dtype=h.dtype)
        out[..., self.vocab] = float("-inf")
        out[:, 0, :self.vocab] = m.lm_head(h)
        if n:
            ids = torch.cat([torch.zeros_like(codes[:, :1]), codes[:, :n]], 1)         # slot 0: h's place
            out[:, 1:n + 1, :self.vocab] = m.depth_decoder(input_ids=ids, backbone_last_hidden_state=h,
                                                           attention_mask=torch.ones_like(ids), use_cache=False).logits
        return out


class CsmTTS:
    """A CSM checkpoint as a text-to-speech pipeline (the call shape of speech.TTS). A list of texts
    gives one result whose audio and codes are lists when the rows end at different frames."""

    decoders = DECODERS
    default_decoder = "local_ar"
    prompt_prefix = "[0]"           # the speaker tag a plain sentence gets (bench)

    def __init__(self, model, processor):
        refuse_settings(model.generation_config, "CSM")
        self.model, self.processor = model.eval(), processor
        self.adapter = CsmAdapter(model)
        codec = model.config.codec_config
        self.sample_rate = codec.sampling_rate
        self.frame_rate = codec.frame_rate

    @classmethod
    def load(cls, folder) -> "CsmTTS":
        return cls(*load_family(folder, FAMILIES, "text-to-speech"))

    def __call__(self, text, decoder: str | None = None, seconds: float | None = None,
                 max_new_tokens: int | None = None, seed: int | None = 0, temperature: float | None = None,
                 top_k: int | None = None, top_p: float | None = None):
        """Speech for `text` (a string or a list; CSM's speaker tag first, e.g. "[0]Hello."), at most
        `seconds` or `max_new_tokens` frames (default: the generation config's max_new_tokens)."""
        from suite import decode, prepare

        from .audio import family_result
        decoder = decoder or self.default_decoder
        if decoder in LACKING:
            raise ValueError(f"decoder {decoder!r} needs {LACKING[decoder]}, which CSM does not have; "
                             f"choose one of: {', '.join(DECODERS)}")
        if decoder not in DECODERS:
            raise ValueError(f"unknown decoder {decoder!r} for CSM; choose one of: {', '.join(DECODERS)}")
        texts = [text] if isinstance(text, str) else list(text)
        frames = self.num_frames(seconds, max_new_tokens)
        sampling = self.sampling(temperature, top_k, top_p)
        t0 = time.perf_counter()
        ids = self.processor.tokenizer(texts, add_special_tokens=True).input_ids        # CSM's processor does this
        bound, dec, state = prepare(self.adapter, [self.adapter.prompt(r) for r in ids], decoder=decoder,
                                    max_new_tokens=frames, **sampling, seed=seed)
        result = decode(bound, dec, state)
        codes = [self.until_silence(torch.tensor(r, dtype=torch.long).reshape(-1, self.adapter.codebooks).T)
                 for r in result.new_tokens]                                           # (Q, T_b) per row
        audio = self.to_audio(codes)
        result.stats.wall_time_s = time.perf_counter() - t0
        return family_result(text, audio, codes, self.sample_rate, result.stats)

    def until_silence(self, codes: torch.Tensor) -> torch.Tensor:
        """(Q, S) -> (Q, T): the frames before the first all-EOS frame (CSM's output_audio cut)."""
        ends = (codes == self.adapter.end_id).all(0).nonzero()
        return codes[:, :int(ends[0])] if len(ends) else codes

    def to_audio(self, codes: list[torch.Tensor]) -> list[np.ndarray]:
        """Mimi decodes each row (Q, T_b) on its own, as CSM's generate does."""
        from .audio import decode_each
        return decode_each(codes, lambda row: self.model.codec_model.decode(row).audio_values, self.adapter.device)

    def num_frames(self, seconds: float | None, max_new_tokens: int | None) -> int:
        gen = self.model.generation_config
        if seconds is not None:
            frames = round(seconds * self.frame_rate)
        elif max_new_tokens is not None or gen.max_new_tokens is not None:
            frames = max_new_tokens if max_new_tokens is not None else gen.max_new_tokens
        else:
            raise ValueError("this CSM's generation config sets no max_new_tokens: pass seconds= or max_new_tokens=")
        if frames < 1:
            raise ValueError(f"{frames} frames asked; ask for at least one (seconds > {0.5 / self.frame_rate:g})")
        return frames

    def sampling(self, temperature, top_k, top_p) -> dict:
        """One setting for every codebook: the call's, or the generation config's when the backbone's
        and the depth decoder's agree."""
        if temperature is not None:
            return {"temperature": temperature, "top_k": top_k, "top_p": top_p}
        own = [self.settings(self.model.generation_config), self.settings(self.model.depth_decoder.generation_config)]
        if own[0] != own[1]:
            raise ValueError(f"this CSM samples its backbone with {own[0]} and its depth decoder with {own[1]}; "
                             "parasuite's local_ar samples every codebook alike: pass temperature= (and top_k=, "
                             "top_p=) to choose one setting")
        out = own[0]
        return {"temperature": out["temperature"], "top_k": top_k if top_k is not None else out["top_k"],
                "top_p": top_p if top_p is not None else out["top_p"]}

    @staticmethod
    def settings(gen) -> dict:
        if not gen.do_sample:
            return {"temperature": 0.0, "top_k": None, "top_p": None}
        top_k = GENERATE_DEFAULTS["top_k"] if gen.top_k is None else gen.top_k or None     # 0: no top-k
        return {"temperature": gen.temperature or 1.0, "top_k": top_k, "top_p": gen.top_p}
