"""Whisper checkpoints (transformers `WhisperForConditionalGeneration`; Radford et al. 2022, "Robust
Speech Recognition via Large-Scale Weak Supervision") as speech recognisers.

    asr = speech.load_asr("whisper-folder")        # model + processor, saved with save_pretrained
    asr(audio, 16000, decoder="lookahead", language="en").text

The encoder runs once per request; the decoder runs through suite's loop (`WhisperAdapter`): its
self-attention K/V lives in suite's KVCache, its cross-attention K/V is computed once (suite's
CrossAttentionAdapter). Whisper's own generation settings are honoured exactly:
- the forced decoder prompt, built as `generate` builds it: <|startoftranscript|>, the language
  (given, the generation config's, or detected by Whisper's own `detect_language`), the task, and
  <|notimestamps|>;
- `suppress_tokens` at every step and `begin_suppress_tokens` at the first generated token: both
  depend on the position alone, so the adapter applies them to the logits it returns and every
  decoder (its drafts included) sees what `generate` sees;
- settings it cannot honour (timestamps, beams, repetition penalties, ...) are refused by name.
Greedy `ar` equals `model.generate(input_features, ...)` token for token; `speculative` (a
layer-truncated decoder as the draft, `draft="self:N"`, as distil-whisper does, or a smaller
Whisper, `draft_model=`), `ngram` and `lookahead` equal `ar`.

Long audio goes in windows of the feature extractor's `chunk_length` (30 s for Whisper), decoded
as one ragged batch; each window equals `generate` on that window. Whisper's own sequential
long-form mode (timestamp tokens, each window conditioned on the previous one) is not reproduced.
"""
from __future__ import annotations

import copy
import math
import time

import numpy as np
import torch

from suite import AdapterConfig
from suite.cache import KVCache
from suite.models.encoder_decoder import CrossAttentionAdapter, causal_mask

from .hf_folder import load_family, refuse_settings

DECODERS = ("ar", "speculative", "ngram", "lookahead")
FAMILIES = {"whisper": ("WhisperForConditionalGeneration", "WhisperProcessor")}
TASK = "speech recognition"
DETECT = -1            # the language slot of a prompt, detected per window

class WhisperAdapter(CrossAttentionAdapter):
    """suite.ModelAdapter over a Whisper decoder bound to one batch of encoder states (B, S, D),
    with Whisper's position-only logits processors applied to what it returns."""

    bind_hint = "adapter.for_features(input_features, prompt_lengths)"

    def __init__(self, model, decoder=None):
        self.model = model.eval()
        self.decoder = decoder if decoder is not None else model.model.decoder
        gen, cfg = model.generation_config, model.config
        eos = gen.eos_token_id if gen.eos_token_id is not None else cfg.eos_token_id
        self.config = AdapterConfig(vocab_size=cfg.vocab_size, eos_token_ids=frozenset(np.atleast_1d(eos).tolist()),
                                    pad_token_id=int(gen.pad_token_id if gen.pad_token_id is not None else eos),
                                    max_length=cfg.max_target_positions)
        dev = self.device
        self.suppress = torch.tensor(gen.suppress_tokens or [], dtype=torch.long, device=dev)
        self.begin_suppress = torch.tensor(gen.begin_suppress_tokens or [], dtype=torch.long, device=dev)
        self.begin_index = None          # (B,) prompt length per row: its first generated position

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def encode(self, features: torch.Tensor) -> torch.Tensor:
        """input_features (B, M, F) -> encoder states (B, S, D)."""
        with torch.no_grad():
            return self.model.model.encoder(input_features=features.to(self.device, self.model.dtype)).last_hidden_state

    def for_features(self, features: torch.Tensor, prompt_lengths, states: torch.Tensor | None = None):
        """An adapter bound to these windows' encoder states (computed here unless given) and the
        prompt length of each row (where begin_suppress_tokens applies)."""
        bound = copy.copy(self)
        bound.encoder_states = self.encode(features) if states is None else states
        bound.begin_index = torch.as_tensor(prompt_lengths, dtype=torch.long, device=self.device)
        return bound

    def truncated(self, num_layers: int) -> "WhisperAdapter":
        """A self-speculative draft: the first `num_layers` decoder layers, sharing the embeddings,
        final norm and output projection (distil-whisper's layer-truncated decoder, untrained)."""
        layers = self.decoder.layers
        if not 1 <= num_layers < len(layers):
            raise ValueError(f"draft='self:{num_layers}' needs 1 <= N < {len(layers)} (the decoder's layer count)")
        short = copy.copy(self.decoder)
        short._modules = {**self.decoder._modules, "layers": torch.nn.ModuleList(list(layers)[:num_layers])}
        short.config = copy.deepcopy(self.decoder.config)
        short.config.decoder_layers = num_layers
        draft = copy.copy(self)
        draft.decoder = short
        return draft

    def new_cache(self, batch: int, max_len: int | None = None) -> KVCache:
        cache = super().new_cache(batch, max_len)
        cache.valid, cache.positions = cache.valid.to(self.device), cache.positions.to(self.device)
        return cache

    def __call__(self, tokens, positions, cache, attention_mask, logits_from: int = 0):
        if attention_mask is None:
            attention_mask = causal_mask(cache, tokens)
        dev = self.device
        hidden = self.decoder(input_ids=tokens.to(dev), position_ids=positions.to(dev), cache=cache.encdec,
                              attention_mask=attention_mask.to(dev), encoder_hidden_states=self.encoder_states,
                              use_cache=True).last_hidden_state
        logits = self.model.proj_out(hidden[:, logits_from:])
        return self.processed(logits, positions[:, logits_from:].to(dev))

    def processed(self, logits: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """(B, N, V) logits at positions (B, N) -> as Whisper's SuppressTokens and
        SuppressTokensAtBegin processors leave them."""
        logits = logits.clone()
        logits[..., self.suppress] = float("-inf")
        if self.begin_suppress.numel():
            first = (positions == self.begin_index[:, None] - 1)[..., None]           # (B, N, 1)
            logits[..., self.begin_suppress] = logits[..., self.begin_suppress].masked_fill(first, float("-inf"))
        return logits


class WhisperASR:
    """A Whisper checkpoint as a speech recogniser (the same call as speech.ASR)."""

    decoders = DECODERS
    default_decoder = "ar"

    def __init__(self, model, processor, draft_model=None):
        refuse_settings(model.generation_config, "Whisper")
        self.adapter = WhisperAdapter(model)
        self.processor = processor
        self.features = processor.feature_extractor
        if self.features.feature_size != model.config.num_mel_bins:
            raise ValueError(f"the feature extractor gives {self.features.feature_size} mel bins, the model takes "
                             f"{model.config.num_mel_bins}: save the model's own processor with it")
        self.draft = None
        if draft_model is not None:
            if draft_model.config.vocab_size != model.config.vocab_size:
                raise ValueError("draft_model has another vocabulary; use a Whisper of the same tokenizer")
            self.draft = WhisperAdapter(draft_model)

    @classmethod
    def load(cls, folder, draft_model=None) -> "WhisperASR":
        """A folder saved with `model.save_pretrained` and `processor.save_pretrained`, offline;
        draft_model: another such folder (a smaller Whisper) for `speculative`."""
        draft = None if draft_model is None else load_family(draft_model, FAMILIES, TASK, with_processor=False)[0]
        return cls(*load_family(folder, FAMILIES, TASK), draft)

    @property
    def sample_rate(self) -> int:
        return self.features.sampling_rate

    @property
    def window_seconds(self) -> float:
        return self.features.n_samples / self.features.sampling_rate

    def __call__(self, audio, sample_rate: int = 16000, decoder: str | None = None, language: str | None = None,
                 task: str | None = None, max_new_tokens: int | None = None, temperature: float = 0.0,
                 seed: int | None = 0, **options):
        """Transcribe (or translate, task="translate") audio of any length. Decoder options go to
        the decoder (speculative: draft="self:N" or the loaded draft_model, num_draft, ...)."""
        from .audio import ASRResult, check_audio
        from .data import SAMPLE_RATE, resample
        decoder = decoder or self.default_decoder
        if decoder not in DECODERS:
            raise ValueError(f"decoder {decoder!r} does not run on a Whisper checkpoint; choose one of: "
                             f"{', '.join(DECODERS)}")
        audio = resample(check_audio(audio, sample_rate, max_seconds=None), SAMPLE_RATE, self.sample_rate)
        t0 = time.perf_counter()
        prompts, result = self.decode_windows(self.window_features(audio), decoder, language, task, max_new_tokens,
                                              temperature, seed, **options)
        texts = self.processor.tokenizer.batch_decode(result.new_tokens, skip_special_tokens=True)
        result.stats.wall_time_s = time.perf_counter() - t0
        return ASRResult(" ".join(t.strip() for t in texts if t.strip()), result.stats, len(audio) / self.sample_rate)

    def decode_windows(self, features: torch.Tensor, decoder: str = "ar", language: str | None = None,
                       task: str | None = None, max_new_tokens: int | None = None, temperature: float = 0.0,
                       seed: int | None = 0, **options):
        """input_features (W, M, F) -> (each window's forced prompt, suite.DecodeResult of the batch);
        language detection's forward is counted in the stats."""
        from suite import decode, prepare
        if decoder not in DECODERS:
            raise ValueError(f"decoder {decoder!r} does not run on a Whisper checkpoint; choose one of: "
                             f"{', '.join(DECODERS)}")
        states = self.adapter.encode(features)
        prompts, detect_forwards = self.prompts(states, language, task)
        target = self.adapter.for_features(features, [len(p) for p in prompts], states)
        if decoder == "speculative":
            decoder, options = self._speculative(target, features, prompts, options), {}
        gen = self.adapter.model.generation_config
        budget = max_new_tokens or gen.max_new_tokens or gen.max_length or self.adapter.config.max_length
        target, dec, state = prepare(target, prompts, decoder=decoder, max_new_tokens=budget,
                                     temperature=temperature, seed=seed, **options)
        result = decode(target, dec, state)
        result.stats.num_forwards += detect_forwards
        return prompts, result

    def transcribe_file(self, path, decoder: str | None = None, **kwargs):
        from .audio import read_audio
        audio, sr = read_audio(path)
        return self(audio, sr, decoder=decoder, **kwargs)

    def window_features(self, audio: np.ndarray) -> torch.Tensor:
        """Audio -> input_features (W, M, F) of its windows (the last one padded, as Whisper pads)."""
        size = self.features.n_samples
        windows = [audio[i * size:(i + 1) * size] for i in range(max(1, math.ceil(len(audio) / size)))]
        return self.features(windows, sampling_rate=self.sample_rate, return_tensors="pt").input_features

    def prompts(self, states: torch.Tensor, language: str | None, task: str | None) -> tuple[list[list[int]], int]:
        """Each window's forced decoder prompt, and the forwards language detection took (0 or 1)."""
        from transformers.modeling_outputs import BaseModelOutput
        model = self.adapter.model
        gen = model.generation_config
        prompt = forced_prompt(gen, model.config, language, task)
        if DETECT not in prompt:
            return [prompt] * states.shape[0], 0
        detected = model.detect_language(encoder_outputs=BaseModelOutput(last_hidden_state=states),
                                         generation_config=gen).tolist()
        return [[lang if t == DETECT else t for t in prompt] for lang in detected], 1

    def _speculative(self, target: WhisperAdapter, features, prompts, options: dict):
        """The speculative decoder with its draft adapter bound to this request."""
        from suite import make_decoder
        options = dict(options)
        spec = options.pop("draft", None)
        if "draft_model" in options:
            raise ValueError("load a draft Whisper with speech.load_asr(folder, draft_model=other_folder); "
                             "or pass draft='self:N' (the first N decoder layers)")
        if spec is None and self.draft is None:
            spec = f"self:{max(1, len(target.decoder.layers) // 2)}"
        if spec is not None:
            kind, _, n = str(spec).partition(":")
            if kind != "self" or not n.isdigit():
                raise ValueError(f"draft must look like 'self:<n_layers>', got {spec!r}")
            drafter = target.truncated(int(n))
        else:
            drafter = self.draft.for_features(features, [len(p) for p in prompts])
        return make_decoder("speculative", draft_model=drafter, **options)


def forced_prompt(gen, config, language: str | None, task: str | None) -> list:
    """The decoder prompt Whisper's `generate` forces (its `_retrieve_init_tokens`, short form, no
    timestamps): start token, language id (None: to be detected), task id, <|notimestamps|>."""
    language = language if language is not None else getattr(gen, "language", None)
    task = task if task is not None else getattr(gen, "task", None)
    if getattr(gen, "is_multilingual", True) is False and (language or task):
        raise ValueError("this Whisper is English-only: drop language= and task=")
    prompt = [gen.decoder_start_token_id]
    if language is None and task is None:
        forced = getattr(gen, "forced_decoder_ids", None) or getattr(config, "forced_decoder_ids", None) or []
        for i, (index, token) in enumerate(forced):
            if index != i + 1:
                raise ValueError(f"forced_decoder_ids {forced} do not follow Whisper's prompt pattern (indices 1, 2, ...)")
            prompt.append(token)
    lang_to_id = getattr(gen, "lang_to_id", None)
    if language is not None:
        lang = language_id(gen, language)
        prompt[1:2] = [lang]
    elif lang_to_id and (len(prompt) == 1 or prompt[1] is None):
        prompt[1:2] = [DETECT]                    # detected per window
    task_ids = getattr(gen, "task_to_id", None) or {}
    if task is not None:
        if task not in task_ids:
            raise ValueError(f"task {task!r} is not one of this checkpoint's tasks: {', '.join(task_ids) or '(none)'}")
        prompt = [t for t in prompt if t not in task_ids.values()] + [task_ids[task]]
    elif language is not None and task_ids and not any(t in prompt for t in task_ids.values()):
        prompt.append(task_ids["transcribe"])
    no_timestamps = getattr(gen, "no_timestamps_token_id", None)
    if no_timestamps is not None and prompt[-1] != no_timestamps:
        prompt.append(no_timestamps)
    return [t for t in prompt if t is not None]


def language_id(gen, language: str) -> int:
    """'fr', 'french' or '<|fr|>' -> the checkpoint's language token id."""
    from transformers.models.whisper.tokenization_whisper import TO_LANGUAGE_CODE
    lang_to_id = getattr(gen, "lang_to_id", None)
    if not lang_to_id:
        raise ValueError("this checkpoint's generation config has no lang_to_id: drop language=")
    name = language.lower()
    token = name if name in lang_to_id else f"<|{TO_LANGUAGE_CODE.get(name, name)}|>"
    if token not in lang_to_id:
        raise ValueError(f"language {language!r} is not one of this checkpoint's languages: "
                         f"{', '.join(sorted(lang_to_id))}")
    return lang_to_id[token]
