"""Dia checkpoints (transformers `DiaForConditionalGeneration`; Nari Labs 2025, "Dia", a byte-level
text encoder and an audio decoder over DAC codebooks) as text-to-speech pipelines.

    tts = speech.load_tts("dia-folder")     # model + tokenizer, the DAC codec in dia-folder/audio_tokenizer
    res = tts("[S1] Hello there.", decoder="delay", seconds=5)
    res.audio, res.sample_rate, res.codes, res.stats

The folder is what `model.save_pretrained(folder)`, `processor.save_pretrained(folder)` and
`processor.audio_tokenizer.save_pretrained(folder / "audio_tokenizer")` write: DiaProcessor saves only
a hub reference to its DAC codec, so the codec's own folder goes beside the model (a local folder
named in processor_config.json works too).

Dia's layout is suite's delay layout (frames/delay.py) with its own lags (`config.delay_pattern`,
e.g. 0, 8, 9, ..., 15): codebook k lags d_k frames, BOS before it starts, EOS then PAD after it ends.
Codebook 0 ends the utterance by EOS; Dia's generation caps it (EOS forced at its max length), as
`Delay(max_frames=T_max)` does. The adapter applies Dia's logits processors in Dia's order: its
classifier-free guidance (c + s (c - u), the null rows reading a zero text, and the conditional logits
kept over the guided top k, k = top_k or generate's default 50), then its EOS filter (only codebook 0 may say EOS, and
only where EOS is its best logit; audio-special ids are never emitted); suite's sampler then applies
temperature, top-k and top-p, as Dia's warpers follow the filter.

Decoders and their cost:
- `delay` (exact: Dia's own factorisation; greedy equals `model.generate` token for token, with its
  guidance when the generation config sets guidance_scale > 1): T + max(d) forwards.
- `parallel` (lossy): all codebooks of a frame per forward, undelayed, T + 1 forwards; Dia was
  trained on the delay layout, so this is out of its training distribution (quality drops).
- `stack`, `local_ar`, `local_maskgit` need heads Dia lacks (stacked frames, a depth transformer):
  refused by name.
Sampling follows the generation config; Dia's generate raises temperatures below 1 to 1.0, and so do
we for the config's value (an explicit temperature in (0, 1) is refused). Settings the adapter cannot
honour (repetition_penalty, beams, ...) are refused by name.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import torch

from suite import AdapterConfig
from suite.models.encoder_decoder import CrossAttentionAdapter

from .hf_folder import GENERATE_DEFAULTS, load_family, refuse_settings, require_files
from .hf_tts import DelayCodecTTS, guided_cache

FAMILIES = {"dia": ("DiaForConditionalGeneration", "DiaProcessor")}
CODEC_FOLDER = "audio_tokenizer"


class DiaAdapter(CrossAttentionAdapter):
    """suite.ModelAdapter over Dia's audio decoder: tokens (B, N, C) at any positions -> logits
    (B, N', C, V) after Dia's guidance and EOS filter, bound to one batch of text states."""

    bind_hint = "adapter.for_text(input_ids, attention_mask)"
    encoder_mask: torch.Tensor | None = None

    def __init__(self, model, guidance_scale: float | None = None, guidance_top_k: int | None = None):
        self.model = model.eval()
        dec = model.config.decoder_config
        self.codebooks, self.delays = dec.num_channels, tuple(model.config.delay_pattern)
        self.start, self.eos, pad = dec.bos_token_id, dec.eos_token_id, dec.pad_token_id
        if not (self.eos < pad < dec.vocab_size and self.eos < self.start < dec.vocab_size):
            raise ValueError(f"Dia's EOS filter needs the audio-special ids after the codes (eos < pad, bos); this "
                             f"config has eos {self.eos}, pad {pad}, bos {self.start}")
        self.guidance = guidance_scale if guidance_scale is not None and guidance_scale != 1 else None
        if self.guidance is not None and self.guidance < 1:
            raise ValueError(f"guidance_scale {guidance_scale}: Dia's guidance needs a scale > 1 (or 1 / None: off)")
        self.guidance_top_k = guidance_top_k
        self.config = AdapterConfig(vocab_size=dec.vocab_size, eos_token_ids=frozenset({(self.eos,) * self.codebooks}),
                                    pad_token_id=pad, max_length=dec.max_position_embeddings,
                                    extra={"codebooks": self.codebooks, "bos": self.start, "eos": self.eos,
                                           "pad": pad, "output": "frame"})

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def for_text(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> "DiaAdapter":
        """Encode the text bytes (B, L) once -> an adapter bound to its states (under guidance the
        null rows after them: Dia's zero text under the same mask)."""
        dev = self.device
        input_ids, attention_mask = input_ids.to(dev), attention_mask.to(dev)
        if self.guidance is not None:
            input_ids = torch.cat([input_ids, torch.zeros_like(input_ids)])
            attention_mask = attention_mask.repeat(2, 1)
        with torch.no_grad():
            states = self.model.model.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        bound = DiaAdapter.__new__(DiaAdapter)
        bound.__dict__.update(self.__dict__, encoder_states=states, encoder_mask=attention_mask)
        return bound

    def new_cache(self, batch: int, max_len: int | None = None):
        return guided_cache(self, batch)

    def __call__(self, tokens, positions, cache, attention_mask, logits_from: int = 0):
        b, n, c = tokens.shape
        dev = self.device
        ids, positions = tokens.to(dev), positions.to(dev)
        if attention_mask is None:
            from suite.models.encoder_decoder import causal_mask
            attention_mask = causal_mask(cache, tokens)
        mask = attention_mask.to(dev)
        if self.guidance is not None:
            ids, positions, mask = ids.repeat(2, 1, 1), positions.repeat(2, 1), mask.repeat(2, 1, 1, 1)
        hidden = self.model.model.decoder(input_ids=ids, position_ids=positions, attention_mask=mask,
                                          encoder_hidden_states=self.encoder_states,
                                          encoder_attention_mask=self.encoder_mask, cache=cache.encdec,
                                          use_cache=True).last_hidden_state[:, logits_from:]
        logits = self.model.logits_dense(hidden).unflatten(-1, (c, -1))               # (R, N', C, V)
        if self.guidance is not None:
            logits = dia_guidance(*logits.split(b), self.guidance, self.guidance_top_k)
        return eos_filter(logits, self.eos)


def dia_guidance(cond: torch.Tensor, uncond: torch.Tensor, scale: float, top_k: int | None) -> torch.Tensor:
    """Dia's classifier-free guidance (DiaClassifierFreeGuidanceLogitsProcessor): g = c + s (c - u);
    with top_k, the conditional logits c kept over g's top k (the rest -inf)."""
    guided = cond + (cond - uncond) * scale
    if top_k is None:
        return guided
    top = guided.topk(min(top_k, guided.shape[-1]), dim=-1).indices
    keep = torch.zeros_like(guided, dtype=torch.bool).scatter(-1, top, True)
    return cond.masked_fill(~keep, float("-inf"))


def eos_filter(logits: torch.Tensor, eos: int) -> torch.Tensor:
    """Dia's DiaEOSChannelFilterLogitsProcessor over (..., C, V): codebooks > 0 never emit EOS or the
    ids after it, codebook 0 never the ids after EOS; EOS is the only candidate where it is the best
    logit and is removed where it is not."""
    logits = logits.clone()
    logits[..., 1:, eos:] = float("-inf")
    logits[..., 0, eos + 1:] = float("-inf")
    ids = torch.arange(logits.shape[-1], device=logits.device)
    best_is_eos = (logits.argmax(-1) == eos)[..., None]                               # (..., C, 1)
    logits = logits.masked_fill(best_is_eos & (ids < eos), float("-inf"))
    return logits.masked_fill(~best_is_eos & (ids == eos), float("-inf"))


class DiaTTS(DelayCodecTTS):
    """A Dia checkpoint as a text-to-speech pipeline (the call shape of speech.TTS). A list of texts
    gives one result whose audio and codes are lists when the rows end at different frames."""

    family = "Dia"
    prompt_prefix = "[S1] "           # the speaker tag a plain sentence gets (bench)

    def __init__(self, model, tokenizer, codec):
        refuse_settings(model.generation_config, "Dia", honoured=("guidance_scale",))
        self.model, self.tokenizer, self.codec = model.eval(), tokenizer, codec.eval()
        self.adapter = DiaAdapter(model)
        self.sample_rate = codec.config.sampling_rate
        self.frame_rate = codec.config.sampling_rate / math.prod(codec.config.downsampling_ratios)

    @classmethod
    def load(cls, folder) -> "DiaTTS":
        import transformers
        folder = Path(folder)
        model, _ = load_family(folder, FAMILIES, "text-to-speech", with_processor=False)
        require_files(folder, (("tokenizer_config.json",),), "DiaProcessor")
        tokenizer = transformers.DiaTokenizer.from_pretrained(str(folder), local_files_only=True)
        return cls(model, tokenizer, load_codec(folder))

    def lags(self) -> tuple[int, ...]:
        return self.adapter.delays

    def bind(self, texts: list[str], guidance_scale: float | None, sampling: dict) -> DiaAdapter:
        gen = self.model.generation_config
        scale = gen.guidance_scale if guidance_scale is None else guidance_scale
        top_k = sampling["top_k"] if sampling["top_k"] is not None else gen.top_k or GENERATE_DEFAULTS["top_k"]
        inputs = self.tokenizer(texts, padding=True, padding_side="right", add_special_tokens=False,
                                return_tensors="pt")
        return DiaAdapter(self.model, scale, top_k).for_text(inputs.input_ids, inputs.attention_mask)

    def delay(self, frames: int):
        from suite.decoders.frames.delay import Delay
        return Delay(delays=self.adapter.delays, max_frames=frames)

    def sampling(self, temperature, top_k, top_p) -> dict:
        if temperature is not None and 0 < temperature < 1:
            raise ValueError(f"temperature {temperature}: Dia samples at temperature >= 1 (its generate raises lower "
                             "values to 1.0); pass 0 for greedy or a value >= 1")
        out = super().sampling(temperature, top_k, top_p)
        if 0 < out["temperature"] < 1:          # the generation config's, raised as Dia's generate does
            out["temperature"] = 1.0
        return out

    def num_frames(self, seconds: float | None, max_new_tokens: int | None) -> int:
        """The frame cap T_max (codebook 0 may end sooner by EOS). As Dia's generate counts:
        max_new_tokens delayed columns make T_max = max_new_tokens - max(d) - 1; its config's
        max_length L (transformers' 20 when unset) makes T_max = L - 1 (generate stretches L by max(d)
        and by the BOS column)."""
        most, gen = max(self.adapter.delays), self.model.generation_config
        if seconds is not None:
            frames = round(seconds * self.frame_rate)
        elif max_new_tokens is not None:
            frames = max_new_tokens - most - 1
        else:
            frames = (gen.max_length or GENERATE_DEFAULTS["max_length"]) - 1
        limit = self.adapter.config.max_length - most - 1
        if not 1 <= frames <= limit:
            raise ValueError(f"{frames} frames asked; this Dia makes 1 to {limit} "
                             f"({limit / self.frame_rate:.1f} s at {self.frame_rate:g} frames/s)")
        return frames

    def to_audio(self, codes: list[torch.Tensor]) -> list[np.ndarray]:
        """DAC decodes each row (C, T_b) on its own, as DiaProcessor.batch_decode does."""
        from .audio import decode_each
        return decode_each(codes, lambda row: self.codec.decode(audio_codes=row).audio_values, self.adapter.device)


def load_codec(folder: Path):
    """Dia's DAC codec: folder/audio_tokenizer, or the local folder processor_config.json names."""
    import transformers
    candidates = [folder / CODEC_FOLDER]
    config = folder / "processor_config.json"
    if config.is_file():
        named = json.loads(config.read_text()).get("audio_tokenizer", {}).get("audio_tokenizer_name_or_path")
        if named:
            candidates.append(Path(named) if Path(named).is_absolute() else folder / named)
    for path in candidates:
        if (path / "config.json").is_file():
            return transformers.DacModel.from_pretrained(str(path), local_files_only=True)
    raise ValueError(f"{folder.name} has no DAC codec: copy a saved transformers DacModel folder (Dia uses the "
                     f"44 kHz DAC) into its '{CODEC_FOLDER}' subfolder, on a machine that has one")
