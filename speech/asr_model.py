"""The recogniser: a conv + transformer encoder with a CTC head (Graves et al. 2006) and a small
transformers Llama attention decoder that reads the encoder frames as its prefix (a decoder-only
"audio prompt" recogniser), trained jointly (hybrid CTC/attention, Watanabe et al. 2017).

Features: log-mel (80, 100 Hz), per-utterance normalised -> encoder at 33 Hz (with `conv_kernel`,
each transformer layer is followed by a conformer convolution module, Gulati et al. 2020).
With `phone_classes`, a linear phone classifier reads the middle layer: training's auxiliary
per-frame loss on flite's phone timings (dense supervision for the lower layers); not used to decode.
Characters: ALPHABET (space, apostrophe, a-z). CTC ids: 0 blank, 1.. characters.
Decoder ids: 0 pad, 1.. characters, then BOS, EOS, AUDIO (a slot filled with an encoder frame).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from suite.runtime.storage import ConfigModule

from . import features
from .data import ALPHABET
from suite.models.adapters import AdapterBase
from suite.models.capabilities import Capabilities

WEIGHTS = Path(__file__).parent / "weights"
BOS, EOS, AUDIO = len(ALPHABET) + 1, len(ALPHABET) + 2, len(ALPHABET) + 3
DEC_VOCAB = len(ALPHABET) + 4


@dataclass
class ASRConfig:
    d_model: int = 144
    enc_layers: int = 4
    heads: int = 4
    dec_layers: int = 2
    dec_hidden: int = 144
    stride: int = 3           # mel frames per encoder frame (100 Hz -> 33 Hz)
    conv_kernel: int = 0      # > 0: a conformer conv module (this depthwise kernel) after each layer
    phone_classes: int = 0    # > 0: a frame phone classifier on the middle layer (training's auxiliary loss)
    alphabet: str = ALPHABET


def text_to_ids(text: str) -> list[int]:
    return [ALPHABET.index(ch) + 1 for ch in text]


def ids_to_text(ids) -> str:
    return "".join(ALPHABET[i - 1] for i in ids if 1 <= i <= len(ALPHABET))


def normalise_features(mel: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
    """(B, 80, F) log-mel -> per-utterance mean/variance normalised over each row's own frames
    (lengths (B,); padding must not shift the statistics, or a batched utterance reads differently
    from the same utterance alone)."""
    if lengths is None:
        return (mel - mel.mean(-1, keepdim=True)) / (mel.std(-1, keepdim=True) + 1e-3)
    valid = (torch.arange(mel.shape[-1], device=mel.device)[None] < lengths[:, None])[:, None].to(mel.dtype)
    n = valid.sum(-1, keepdim=True)
    mean = (mel * valid).sum(-1, keepdim=True) / n
    std = (((mel - mean) ** 2 * valid).sum(-1, keepdim=True) / (n - 1).clamp(min=1)).sqrt()
    return (mel - mean) / (std + 1e-3)


class ConvModule(nn.Module):
    """Conformer convolution module (Gulati et al. 2020): pointwise conv + GLU, depthwise conv,
    norm, SiLU, pointwise conv; padded frames are zeroed so they never leak into real ones."""

    def __init__(self, d: int, kernel: int):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.pw_in = nn.Linear(d, 2 * d)
        self.depthwise = nn.Conv1d(d, d, kernel, padding=kernel // 2, groups=d)
        self.mid_norm = nn.LayerNorm(d)
        self.pw_out = nn.Linear(d, d)
        self.dropout = nn.Dropout(0.1)

    def forward(self, x: torch.Tensor, pad: torch.Tensor) -> torch.Tensor:
        """x (B, F', D), pad (B, F') True on padding -> x plus the module's output."""
        h = nn.functional.glu(self.pw_in(self.norm(x)), dim=-1).masked_fill(pad[..., None], 0.0)
        h = self.depthwise(h.transpose(1, 2)).transpose(1, 2)
        return x + self.dropout(self.pw_out(nn.functional.silu(self.mid_norm(h))))


class Encoder(nn.Module):
    def __init__(self, c: ASRConfig):
        super().__init__()
        d = c.d_model
        self.subsample = nn.Sequential(nn.Conv1d(features.N_MELS, d, 3, padding=1), nn.GELU(),
                                       nn.Conv1d(d, d, 3, stride=c.stride, padding=1), nn.GELU())
        self.stride = c.stride
        self.pos_conv = nn.Conv1d(d, d, 15, padding=7, groups=d)
        layer = nn.TransformerEncoderLayer(d, c.heads, 3 * d, dropout=0.1, batch_first=True, norm_first=True)
        self.layers = nn.TransformerEncoder(layer, c.enc_layers, enable_nested_tensor=False)
        self.convs = nn.ModuleList(ConvModule(d, c.conv_kernel) for _ in range(c.enc_layers if c.conv_kernel else 0))
        self.norm = nn.LayerNorm(d)

    def forward(self, mel: torch.Tensor, lengths: torch.Tensor):
        """mel (B, 80, F), lengths (B,) mel frames -> (B, F', D), lengths (B,) with F' = ceil(F / stride),
        and the middle layer's output (B, F', D)."""
        x = self.subsample(normalise_features(mel, lengths))
        x = (x + self.pos_conv(x)).transpose(1, 2)
        out_len = (lengths + self.stride - 1) // self.stride
        pad = torch.arange(x.shape[1], device=x.device)[None] >= out_len[:, None]
        middle = x
        for i, layer in enumerate(self.layers.layers):
            x = layer(x, src_key_padding_mask=pad)
            if self.convs:
                x = self.convs[i](x, pad)
            if i == (len(self.layers.layers) - 1) // 2:
                middle = x
        return self.norm(x), out_len, middle


class Recogniser(ConfigModule, nn.Module):
    model_type, config_class, what = "parasuite-ctc-attention-asr", ASRConfig, "ASR"
    train_command, default_folder = "python -m speech.train asr", WEIGHTS / "asr"

    def __init__(self, config: ASRConfig):
        super().__init__()
        from transformers import LlamaConfig, LlamaForCausalLM
        self.config = config
        self.encoder = Encoder(config)
        self.ctc_head = nn.Linear(config.d_model, len(ALPHABET) + 1)
        self.phone_head = nn.Linear(config.d_model, config.phone_classes) if config.phone_classes else None
        self.bridge = nn.Linear(config.d_model, config.dec_hidden)
        self.decoder = LlamaForCausalLM(LlamaConfig(
            vocab_size=DEC_VOCAB, hidden_size=config.dec_hidden, intermediate_size=2 * config.dec_hidden,
            num_hidden_layers=config.dec_layers, num_attention_heads=4, num_key_value_heads=4,
            max_position_embeddings=2048, bos_token_id=BOS, eos_token_id=EOS, pad_token_id=0,
            tie_word_embeddings=False, attn_implementation="sdpa"))

    def encode(self, mel: torch.Tensor, lengths: torch.Tensor, phones: bool = False):
        """-> encoder frames (B, F', D), CTC log-probs (B, F', 29), frame lengths (B,) [and, with
        `phones`, the middle layer's phone logits (B, F', phone_classes)]."""
        enc, enc_len, middle = self.encoder(mel, lengths)
        out = enc, self.ctc_head(enc).float().log_softmax(-1), enc_len   # fp32 even under autocast
        return (*out, self.phone_head(middle).float()) if phones else out


class AudioPrefixLM(AdapterBase):
    """ModelAdapter over the attention decoder: token AUDIO at logical position p stands for encoder
    frame p of its row. An adapter bound to a batch of utterances (prefix (B, F', H)) puts the
    prefix into each cache it makes (`cache.row_inputs`), and every forward reads it from there, so
    rows of different utterances run together through any adapter of the model (suite.scheduler)."""

    capabilities = Capabilities(custom_mask=True, row_moves=True)

    def __init__(self, model: Recogniser, prefix: torch.Tensor | None = None):
        from suite import AdapterConfig
        self.model = model.decoder
        self.prefix = prefix
        self.config = AdapterConfig(vocab_size=DEC_VOCAB, eos_token_ids=frozenset({EOS}), pad_token_id=0,
                                    max_length=2048)

    def new_cache(self, batch: int, max_len: int | None = None):
        from suite import KVCache
        if self.prefix is None or self.prefix.shape[0] != batch:
            raise ValueError("bind the adapter to a batch of utterances first: AudioPrefixLM(model, prefix)")
        cache = KVCache(batch, device=self.prefix.device)
        cache.row_inputs["audio_prefix"] = self.prefix
        return cache

    def __call__(self, tokens, positions, cache, attention_mask, logits_from: int = 0):
        prefix = cache.row_inputs["audio_prefix"]           # (B, F', H), zero-padded past a row's frames
        embeds = self.model.get_input_embeddings()(tokens.clamp(max=DEC_VOCAB - 1))
        idx = positions.clamp(max=prefix.shape[1] - 1)
        frames = prefix.gather(1, idx[..., None].expand(-1, -1, prefix.shape[2]))
        embeds = torch.where((tokens == AUDIO)[..., None], frames, embeds)
        if attention_mask is None:
            n = tokens.shape[1]
            causal = torch.ones(n, n, dtype=torch.bool, device=cache.valid.device).tril()
            attention_mask = cache.attention_mask(causal.expand(tokens.shape[0], n, n))
        out = self.model(inputs_embeds=embeds, position_ids=positions, cache=cache.backend,
                         attention_mask=attention_mask, use_cache=True, logits_to_keep=tokens.shape[1] - logits_from)
        return out.logits
