"""The OCR model: a timm CNN image encoder and a transformers GPT-2 text decoder with
cross-attention (the VisionEncoderDecoder layout: `encoder_hidden_states` feed every decoder
layer), trained with a causal and a block-diffusion objective (see `block_train_mask`).

`OCRAdapter` is the suite.ModelAdapter for one batch of line images: the encoder runs once per
image (`OCRAdapter.for_images`), the decoder's self-attention K/V lives in suite's KVCache and the
cross-attention K/V is computed once per request and kept beside it.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from torch import nn

from suite import AdapterConfig
from suite.models.encoder_decoder import CrossAttentionAdapter, load_tied, save_tied
from suite.runtime.storage import read_json

PAD, BOS, EOS, MASK = 0, 1, 2, 3
SPECIALS = ("<pad>", "<s>", "</s>", "<mask>")


class CharTokenizer:
    """One token per character of a fixed charset, after the 4 special tokens."""

    def __init__(self, charset: str):
        self.charset = charset
        self.index = {c: i + len(SPECIALS) for i, c in enumerate(charset)}

    @property
    def vocab_size(self) -> int:
        return len(SPECIALS) + len(self.charset)

    def encode(self, text: str) -> list[int]:
        """text -> [BOS, chars..., EOS]; characters outside the charset are dropped."""
        return [BOS] + [self.index[c] for c in text if c in self.index] + [EOS]

    def decode(self, ids) -> str:
        n = len(SPECIALS)
        return "".join(self.charset[i - n] for i in ids if i >= n)


def default_config(charset: str, max_chars: int, height: int, width: int) -> dict:
    return {"charset": charset, "max_chars": max_chars, "height": height, "width": width,
            "encoder": {"layers": [1, 1, 1, 1], "channels": [32, 48, 64, 96], "stem_width": 24, "rows": 2},
            "decoder": {"n_embd": 160, "n_layer": 3, "n_head": 4},
            "mask_token_id": MASK, "bos_token_id": BOS, "eos_token_id": EOS, "pad_token_id": PAD}


class ImageEncoder(nn.Module):
    """(B, 1, H, W) grayscale lines -> (B, S, D) features: a timm ResNet at output stride 8,
    pooled to `rows` rows, with learned 2-D position embeddings; S = rows * W / 8."""

    def __init__(self, cfg: dict, dim: int):
        super().__init__()
        from timm.models.resnet import BasicBlock, ResNet
        e = cfg["encoder"]
        self.cnn = ResNet(BasicBlock, layers=tuple(e["layers"]), channels=tuple(e["channels"]), in_chans=1,
                          stem_width=e["stem_width"], output_stride=8, num_classes=0, global_pool="")
        self.rows, self.cols = e["rows"], cfg["width"] // 8
        self.pool = nn.AdaptiveAvgPool2d((self.rows, self.cols))
        self.proj = nn.Conv2d(e["channels"][-1], dim, 1)
        self.pos = nn.Parameter(torch.zeros(1, self.rows * self.cols, dim))
        nn.init.normal_(self.pos, std=0.02)
        self.cnn.to(memory_format=torch.channels_last)     # NHWC convolutions: about 2x faster on CPU

    def fold_batch_norms(self) -> "ImageEncoder":
        """For inference only: every BatchNorm2d folded into the convolution before it (timm's
        ResNet names them convK/bnK, and downsample = Sequential(conv, bn)); same outputs to float
        round-off, one pass less per layer. Training needs the BatchNorms: fold a copy."""
        from torch.nn.utils.fusion import fuse_conv_bn_eval
        for parent in list(self.cnn.modules()):
            names = list(parent._modules)
            for i, name in enumerate(names):
                bn = parent._modules[name]
                if not isinstance(bn, nn.BatchNorm2d):
                    continue
                conv_name = "conv" + name[2:] if name.startswith("bn") else names[i - 1]
                conv = parent._modules.get(conv_name)
                if not isinstance(conv, nn.Conv2d):
                    raise ValueError(f"no convolution before BatchNorm {name!r} to fold it into")
                parent._modules[conv_name] = fuse_conv_bn_eval(conv.eval(), bn.eval())
                parent._modules[name] = nn.Identity()
        self.cnn.to(memory_format=torch.channels_last)
        return self

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        x = (pixels * 2 - 1).contiguous(memory_format=torch.channels_last)
        f = self.proj(self.pool(self.cnn.forward_features(x)))                 # (B, D, rows, cols)
        return (f.flatten(2).transpose(1, 2) + self.pos).contiguous()         # (B, S, D)


class OCRModel(nn.Module):
    def __init__(self, cfg: dict):
        super().__init__()
        from transformers import GPT2Config, GPT2LMHeadModel
        self.cfg = cfg
        self.tokenizer = CharTokenizer(cfg["charset"])
        d = cfg["decoder"]
        self.encoder = ImageEncoder(cfg, d["n_embd"])
        dec_cfg = GPT2Config(vocab_size=self.tokenizer.vocab_size, n_positions=cfg["max_chars"] + 4,
                             n_embd=d["n_embd"], n_layer=d["n_layer"], n_head=d["n_head"],
                             add_cross_attention=True, bos_token_id=BOS, eos_token_id=EOS,
                             pad_token_id=None,    # the loop masks padded rows (PAD is the adapter's); no HF padding note
                             resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                             activation_function="gelu_pytorch_tanh")    # GPT-2's gelu_new, one fused op
        dec_cfg._attn_implementation = "sdpa"
        self.decoder = GPT2LMHeadModel(dec_cfg)
        # auxiliary CTC head on the encoder columns (training only: it speeds up learning to read)
        self.ctc_head = nn.Linear(d["n_embd"], self.tokenizer.vocab_size)

    @property
    def max_length(self) -> int:
        return self.cfg["max_chars"] + 2     # BOS + chars + EOS

    def ctc_logits(self, encoder_states: torch.Tensor) -> torch.Tensor:
        """(B, S, D) encoder states -> (B, cols, V) CTC logits (rows averaged; blank = PAD)."""
        e = self.encoder
        cols = encoder_states.reshape(encoder_states.shape[0], e.rows, e.cols, -1).mean(1)
        return self.ctc_head(cols)

    def decoder_logits(self, tokens, positions, mask, encoder_states):
        """tokens/positions (B, N), mask (B, 1, N, N) bool, encoder_states (B, S, D) -> (B, N, V)."""
        return self.decoder(input_ids=tokens, position_ids=positions, attention_mask=mask,
                            encoder_hidden_states=encoder_states, use_cache=False).logits

    def save(self, folder: str | Path, extra: dict | None = None) -> None:
        """Weights and config.json (the config, with `extra` such as training counters), each written whole."""
        save_tied(self, folder, {**self.cfg, **(extra or {})})

    @classmethod
    def load(cls, folder: str | Path) -> "OCRModel":
        folder = Path(folder)
        if not (folder / "config.json").is_file() or not (folder / "model.safetensors").is_file():
            raise ValueError(f"no OCR weights in {folder}: it needs config.json and model.safetensors; "
                             "train them with `python -m document.train`")
        return load_tied(cls(read_json(folder / "config.json")), folder).eval()


def block_anchor(n: int, block_size: int, offset: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """(n,) the anchor (first position) of each position's block; blocks start at offset + k*B
    (positions before `offset` form a block anchored at 0)."""
    p = torch.arange(n, device=device)
    k = torch.div(p - offset, block_size, rounding_mode="floor")
    return torch.where(p >= offset, offset + k * block_size, torch.zeros_like(p))


def block_train_mask(n: int, block_size: int, offset: int = 0, device: torch.device | str = "cpu") -> torch.Tensor:
    """(2n, 2n) bool attention for one training sequence laid out as [clean n slots ++ noisy n slots].

    clean slot p: causal over clean slots (the plain AR stream; its K/V is what the cache holds).
    noisy slot p in a block anchored at a (p > a): sees the clean slots <= a (the committed past,
    anchor included) and, bidirectionally, the noisy slots of its own block except the anchor's.
    The anchor's noisy slot is an unused duplicate (sees clean <= a only). With block size 1 every
    noisy slot is an anchor: the objective is plain AR."""
    a = block_anchor(n, block_size, offset, device)
    p = torch.arange(n, device=device)
    inner = p > a                                              # (n,) noisy slot carries a masked/filled token
    mask = torch.zeros(2 * n, 2 * n, dtype=torch.bool, device=device)
    mask[:n, :n] = torch.ones(n, n, dtype=torch.bool, device=device).tril()
    mask[n:, :n] = p[None, :] <= a[:, None]
    same_block = (a[:, None] == a[None, :]) & inner[:, None] & inner[None, :]
    mask[n:, n:] = same_block | torch.eye(n, dtype=torch.bool, device=device)
    return mask


class OCRAdapter(CrossAttentionAdapter):
    """suite.ModelAdapter over OCRModel's decoder for one batch of encoded line images.

    `for_images(pixels)` runs the encoder once and returns an adapter bound to those images;
    decoders then call it like any adapter. Config extra: mask_token_id, bos_token_id."""

    def __init__(self, model: OCRModel, encoder_states: torch.Tensor | None = None):
        self.model = model.eval()
        self.encoder_states = encoder_states            # (B, S, D) or None (unbound)
        self.config = AdapterConfig(vocab_size=model.tokenizer.vocab_size, eos_token_ids=frozenset([EOS]),
                                    pad_token_id=PAD, max_length=model.max_length,
                                    extra={"mask_token_id": model.cfg["mask_token_id"],
                                           "bos_token_id": model.cfg["bos_token_id"]})

    # the line-reader interface document.ocr.OCR uses (document/ved.py has the same for
    # transformers VisionEncoderDecoder checkpoints)
    start_token_id = BOS
    split_lines = True       # lines of more than ~27 characters are read in pieces (OCR.pieces)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def cost_identity(self) -> list[str]:
        """What this reader's forward cost depends on besides the machine
        (suite.cost's key): the architecture (config without training counters), dtype and device."""
        arch = {k: v for k, v in self.model.cfg.items() if not k.startswith("train_")}
        return ["OCRModel", json.dumps(arch, sort_keys=True), str(next(self.model.parameters()).dtype), str(self.device)]

    def pixels(self, images) -> torch.Tensor:
        """PIL line images -> (B, 1, H, W) model input in [0, 1]."""
        from .data import to_model_input
        return torch.from_numpy(np.stack([to_model_input(im) for im in images]))[:, None]

    def decode_text(self, ids: list[int]) -> str:
        return self.model.tokenizer.decode(ids)

    def prior_tokens(self, text: str) -> list[int]:
        """A known text as the tokens a row would hold: start token + characters (no EOS)."""
        return self.model.tokenizer.encode(text)[:-1]

    def ctc_drafts(self) -> list[dict]:
        """`ctc_speculative`'s drafts: each line read greedily by the auxiliary CTC head over the
        encoder columns (blank = PAD; its classes are the tokenizer's ids), with frame entropies."""
        from suite.decoders.chain.ctc_speculative import ctc_draft
        with torch.no_grad():
            log_probs = self.model.ctc_logits(self.encoder_states).log_softmax(-1)    # (B, cols, V)
        return [ctc_draft(row, row.shape[0], blank=PAD) for row in log_probs]

    def for_images(self, pixels: torch.Tensor) -> "OCRAdapter":
        """pixels (B, 1, H, W) in [0, 1], on any device (moved once to the model's) -> an adapter
        holding their encoder states."""
        weight = next(self.model.parameters())
        with torch.no_grad():
            return OCRAdapter(self.model, self.model.encoder(pixels.to(weight.device, weight.dtype)))
