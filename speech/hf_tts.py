"""MusicGen checkpoints (transformers `MusicgenForConditionalGeneration`; Copet et al. 2023, "Simple
and Controllable Music Generation") as text-to-audio pipelines.

    tts = speech.load_tts("musicgen-folder")       # model + processor, saved with save_pretrained
    res = tts("lo-fi drums", decoder="delay", seconds=5)
    res.audio, res.sample_rate, res.codes, res.stats

The text encoder (T5) runs once per request; the audio decoder runs through suite's loop
(`MusicgenAdapter`: its self-attention K/V in suite's KVCache, its cross-attention K/V computed
once); the family's own codec (EnCodec, `model.audio_encoder`) decodes the codes.

MusicGen's delay layout is suite's (frames/delay.py): codebook k lags k frames; slots before a
codebook starts and after it ends hold MusicGen's start/pad id (bos = eos = pad = that id in
`config.extra`), and MusicGen has no EOS: the frame count T is fixed by the request
(`Delay(fixed_frames=T)`; T = max_length - K as `generate` counts it). The heads never emit the
start id (it is not in their vocabulary): the adapter returns its logit as -inf.

Decoders and their cost:
- `delay` (exact: MusicGen's own factorisation; greedy equals `model.generate` token for token,
  with its classifier-free guidance when the generation config sets guidance_scale > 1):
  T + K - 1 forwards.
- `parallel` (lossy): all K codebooks of a frame per forward, undelayed, T forwards; MusicGen was
  trained on the delay layout, so this is out of its training distribution (quality drops).
- `stack`, `local_ar`, `local_maskgit` need heads MusicGen lacks (stacked frames, a depth
  transformer): refused by name.
Sampling settings follow the generation config (do_sample, temperature, top_k, top_p) unless the
call overrides them; settings the adapter cannot honour are refused by name.
"""
from __future__ import annotations

import time

import numpy as np
import torch

from suite import AdapterConfig
from suite.cache import KVCache
from suite.models.encoder_decoder import CrossAttentionAdapter

from .hf_folder import GENERATE_DEFAULTS, load_family, refuse_settings

DECODERS = ("delay", "parallel")
LACKING = {"stack": "stacked heads over two frames", "stack_local": "stacked heads and a local transformer",
           "local_ar": "a local (depth) transformer over the codebooks",
           "local_maskgit": "a local (depth) transformer over the codebooks", "flat": "a flattened-codes model"}
FAMILIES = {"musicgen": ("MusicgenForConditionalGeneration", "MusicgenProcessor")}


class MusicgenAdapter(CrossAttentionAdapter):
    """suite.ModelAdapter over MusicGen's audio decoder: tokens (B, N, K) -> logits (B, N', K, V+1)
    (the last id, MusicGen's start/pad id, at -inf), bound to one batch of text states; with
    guidance_scale > 1 it runs the conditional and the null-text rows together and returns
    u + s (c - u), as MusicGen's ClassifierFreeGuidanceLogitsProcessor does."""

    bind_hint = "adapter.for_text(input_ids, attention_mask)"
    encoder_mask: torch.Tensor | None = None

    def __init__(self, model, guidance_scale: float | None = None):
        self.model = model.eval()
        dec = model.decoder.config
        self.codebooks, self.start = dec.num_codebooks, model.generation_config.decoder_start_token_id
        if self.start != dec.vocab_size:
            raise ValueError(f"decoder_start_token_id {self.start} is not MusicGen's start id {dec.vocab_size} "
                             "(the id after the codes): this checkpoint's delay layout is not MusicGen's")
        if dec.audio_channels != 1:
            raise ValueError("stereo MusicGen (audio_channels=2) is not supported yet: use a mono checkpoint")
        self.guidance = guidance_scale if guidance_scale is not None and guidance_scale > 1 else None
        frame_end = (self.start,) * self.codebooks
        self.config = AdapterConfig(vocab_size=dec.vocab_size + 1, eos_token_ids=frozenset({frame_end}),
                                    pad_token_id=self.start, max_length=dec.max_position_embeddings,
                                    extra={"codebooks": self.codebooks, "bos": self.start, "eos": self.start,
                                           "pad": self.start, "output": "frame"})

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def for_text(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> "MusicgenAdapter":
        """Encode the text (B, L) once -> an adapter bound to its states (with the null rows under CFG)."""
        m, dev = self.model, self.device
        input_ids, attention_mask = input_ids.to(dev), attention_mask.to(dev)
        with torch.no_grad():
            states = m.text_encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        if self.guidance is not None:      # MusicGen's null condition: zero states, nothing attended
            states = torch.cat([states, torch.zeros_like(states)])
            attention_mask = torch.cat([attention_mask, torch.zeros_like(attention_mask)])
        with torch.no_grad():
            if m.text_encoder.config.hidden_size != m.decoder.config.hidden_size \
                    and m.decoder.config.cross_attention_hidden_size is None:
                states = m.enc_to_dec_proj(states)        # as MusicgenForConditionalGeneration.forward does
        bound = MusicgenAdapter.__new__(MusicgenAdapter)
        bound.__dict__.update(self.__dict__, encoder_states=states * attention_mask[..., None],
                              encoder_mask=attention_mask)
        return bound

    def new_cache(self, batch: int, max_len: int | None = None) -> KVCache:
        return guided_cache(self, batch)

    def __call__(self, tokens, positions, cache, attention_mask, logits_from: int = 0):
        b, n, k = tokens.shape
        slots = cache.num_slots
        if not bool(cache.valid.all()) or not bool((positions == torch.arange(slots, slots + n,
                                                                              device=positions.device)).all()):
            raise ValueError("MusicGen's decoder places tokens by cache length (it takes no position ids): decode it "
                             "with delay or parallel, whose frames stay contiguous")
        ids = tokens.to(self.device).permute(0, 2, 1).reshape(b * k, n)             # (B*K, N), as MusicGen lays them
        if self.guidance is not None:
            ids = ids.repeat(2, 1)
        logits = self.model.decoder(input_ids=ids, encoder_hidden_states=self.encoder_states,
                                    encoder_attention_mask=self.encoder_mask, cache=cache.encdec,
                                    use_cache=True).logits[:, logits_from:]          # (R*K, N', V)
        if self.guidance is not None:
            cond, uncond = logits.split(b * k)
            logits = uncond + (cond - uncond) * self.guidance
        logits = logits.reshape(b, k, -1, logits.shape[-1]).permute(0, 2, 1, 3)      # (B, N', K, V)
        never = torch.full((*logits.shape[:3], 1), float("-inf"), device=logits.device, dtype=logits.dtype)
        return torch.cat([logits, never], -1)                                       # (B, N', K, V+1)


class DelayCodecTTS:
    """What the delay-pattern families (MusicGen, Dia: speech/hf_dia.py) share as text-to-audio
    pipelines (the call shape of speech.TTS): the decoder check, the sampling defaults of the
    generation config, one decode through suite's loop and the undelay of each row. A family gives
    `family`, `adapter` (bound per request by `bind`), `delay(frames)`, `num_frames` and `to_audio`."""

    decoders = DECODERS
    default_decoder = "delay"
    family = "?"

    def __call__(self, text, decoder: str | None = None, seconds: float | None = None,
                 max_new_tokens: int | None = None, seed: int | None = 0, temperature: float | None = None,
                 top_k: int | None = None, top_p: float | None = None, guidance_scale: float | None = None):
        """Audio for `text` (a string or a list of them). Length: `seconds`, or `max_new_tokens`
        delayed columns as the family's generate counts them, default the generation config's
        max_length. Sampling defaults: the generation config's."""
        from suite import decode, prepare

        from .audio import family_result
        decoder = self.check_decoder(decoder)
        texts = [text] if isinstance(text, str) else list(text)
        frames = self.num_frames(seconds, max_new_tokens)
        sampling = self.sampling(temperature, top_k, top_p)
        t0 = time.perf_counter()
        bound = self.bind(texts, guidance_scale, sampling)
        k, lags = bound.codebooks, self.lags()
        dec = self.delay(frames) if decoder == "delay" else decoder
        bound, dec, state = prepare(bound, [[(bound.start,) * k] for _ in texts], decoder=dec,
                                    max_new_tokens=frames + (max(lags) + 1 if decoder == "delay" else 0),
                                    **sampling, seed=seed)
        result = decode(bound, dec, state)
        eos = bound.config.extra["eos"]
        codes = [row_codes(torch.tensor(r, dtype=torch.long, device=state.device).T, eos, frames,
                           lags if decoder == "delay" else None)
                 for r in result.new_tokens]                                          # (K, T_b) per row
        audio = self.to_audio(codes)
        result.stats.wall_time_s = time.perf_counter() - t0
        return family_result(text, audio, codes, self.sample_rate, result.stats)

    def check_decoder(self, decoder: str | None) -> str:
        decoder = decoder or self.default_decoder
        if decoder in LACKING:
            raise ValueError(f"decoder {decoder!r} needs {LACKING[decoder]}, which {self.family} does not have; "
                             f"choose one of: {', '.join(self.decoders)}")
        if decoder not in self.decoders:
            raise ValueError(f"unknown decoder {decoder!r} for {self.family}; "
                             f"choose one of: {', '.join(self.decoders)}")
        return decoder

    def lags(self) -> tuple[int, ...]:
        return tuple(range(self.adapter.codebooks))

    def sampling(self, temperature, top_k, top_p) -> dict:
        """The generation config's sampling settings (an unset top_k is generate's 50), each
        overridable by the call."""
        gen = self.model.generation_config
        top_k = GENERATE_DEFAULTS["top_k"] if gen.top_k is None else gen.top_k or None     # 0: no top-k
        own = {"temperature": (gen.temperature or 1.0) if gen.do_sample else 0.0,
               "top_k": top_k if gen.do_sample else None, "top_p": gen.top_p if gen.do_sample else None}
        given = {"temperature": temperature, "top_k": top_k, "top_p": top_p}
        return {name: own[name] if given[name] is None else given[name] for name in own}


def row_codes(columns: torch.Tensor, eos: int, frames: int, lags: tuple[int, ...] | None) -> torch.Tensor:
    """One row's committed columns (K, S) -> its codes (K, T): T frames up to codebook 0's first EOS
    (at most `frames`), undelayed by `lags` (None: undelayed columns, `parallel`'s)."""
    from suite.decoders.frames.delay import undelay
    ends = (columns[0] == eos).nonzero()
    t = min(int(ends[0]) if len(ends) else columns.shape[1], frames)
    return undelay(columns, t, lags) if lags is not None else columns[:, :t]


def guided_cache(adapter, batch: int) -> KVCache:
    """A cache for `batch` rows of an adapter bound to its text states (`encoder_states`): its
    self-attention K/V in suite's KVCache, the cross-attention K/V beside it (`cache.encdec`); under
    classifier-free guidance (`adapter.guidance` set) 2 backend rows per row, the null rows after."""
    from transformers import DynamicCache, EncoderDecoderCache
    rows = 2 * batch if adapter.guidance is not None else batch
    if adapter.encoder_states is None or adapter.encoder_states.shape[0] != rows:
        raise ValueError(f"bind the adapter to a batch of texts first: {adapter.bind_hint}")
    cache = KVCache(rows, device=adapter.device)
    cache.encdec = EncoderDecoderCache(cache.backend, DynamicCache())
    return cache.grouped(2) if adapter.guidance is not None else cache


class MusicgenTTS(DelayCodecTTS):
    """A MusicGen checkpoint as a text-to-audio pipeline (the call shape of speech.TTS)."""

    family = "MusicGen"
    prompt_prefix = ""           # the speaker tag a plain sentence gets (bench)

    def __init__(self, model, processor):
        gen = model.generation_config
        refuse_settings(gen, "MusicGen", honoured=("guidance_scale",))
        self.model, self.processor = model.eval(), processor
        self.adapter = MusicgenAdapter(model, gen.guidance_scale)
        self.sample_rate = model.config.audio_encoder.sampling_rate
        self.frame_rate = model.config.audio_encoder.frame_rate

    @classmethod
    def load(cls, folder) -> "MusicgenTTS":
        return cls(*load_family(folder, FAMILIES, "text-to-audio"))

    def bind(self, texts: list[str], guidance_scale: float | None, sampling: dict) -> MusicgenAdapter:
        adapter = self.adapter
        if guidance_scale is not None and guidance_scale != self.model.generation_config.guidance_scale:
            adapter = MusicgenAdapter(self.model, guidance_scale)
        inputs = self.processor(text=texts, padding=True, return_tensors="pt")
        return adapter.for_text(inputs.input_ids, inputs.attention_mask)

    def delay(self, frames: int):
        from suite.decoders.frames.delay import Delay
        return Delay(fixed_frames=frames)          # MusicGen has no EOS: the request fixes T

    def to_audio(self, codes: list[torch.Tensor]) -> list[np.ndarray]:
        """EnCodec decodes the codes (all rows have T frames) -> one waveform per row."""
        with torch.no_grad():
            audio = self.model.audio_encoder.decode(torch.stack(codes)[None].to(self.adapter.device),
                                                    audio_scales=[None] * len(codes)).audio_values[:, 0]
        return list(audio.cpu().numpy())

    def num_frames(self, seconds: float | None, max_new_tokens: int | None) -> int:
        """MusicGen's generate: T = max_new_tokens + 1 - K frames (max_length - K by default)."""
        k, gen = self.adapter.codebooks, self.model.generation_config
        if seconds is not None:
            frames = round(seconds * self.frame_rate)
        else:
            total = max_new_tokens + 1 if max_new_tokens is not None else gen.max_length
            frames = total - k
        limit = self.adapter.config.max_length - k
        if not 1 <= frames <= limit:
            raise ValueError(f"{frames} frames asked; this MusicGen makes 1 to {limit} "
                             f"({limit / self.frame_rate:.1f} s at {self.frame_rate} frames/s)")
        return frames
