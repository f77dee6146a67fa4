"""The AR video prior: a transformers `LlamaForCausalLM` over `[motion, class] + T*H*W codes`
(frames in raster order, each frame in raster order) and its `suite` adapter.

Token ids: codes 0..K-1, class c -> K + c, null class K + C, motion m -> K + C + 1 + m, null
motion K + C + 1 + M (both nulls together: the unconditional prompt of classifier-free
guidance), and BOF, the frame-start token, K + C + M + 2.

The windowed 4-D mask (`VideoLayout.mask`): slot p predicts cell p + 1 - P (P = 2 prompt
tokens), and it belongs to that cell's frame t. It sees the prompt, the earlier slots of frame t,
and the slots of frame t-1 that hold a cell within `radius` rows and columns of its cell; nothing
older. The slot that predicts a frame's first cell (the frame-start slot) holds the previous
frame's last cell: its input is replaced by BOF (`VideoLayout.inputs`) and no other slot sees it,
so that code is never an input, the slot needs no real token, and frame t may start once frame
t-1 has `radius` rows and `radius` + 1 cells more (exactly, under this mask). Position
ids: both prompt tokens at 0, cell j at 1 + j, so frame 0 sits where the image prior's image does
(`warm_start` copies its weights). With video_prior.json's "positions" (vision/video/rotary.py)
the rotary embedding reads an id as (frame, slot in the frame), so every frame sits where the
image does and "the same cell one frame back" is a small offset; without it, plain 1-D rotary.
With its "inputs" (vision/video/prevframe.py) a slot also reads the codes of frame t-1 around its
cell directly (input tables, a copy head): the adapter keeps each row's fed tokens by position in
the cache (`row_inputs["board"]`), so a cached forward that receives only new tokens finds them.
With its "copy" (vision/video/motioncopy.py) the logits mix in a copy of frame t-1 at the offset
the prompt's motion implies; each row's motion (and its unconditional copy's, under guidance)
travels in the cache too (`row_inputs["motion"]`).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, replace

import torch

from suite import AdapterConfig, HFCausalLM, KVCache
from suite.runtime.storage import read_json

from ..prior import SHARD_INDEX
from . import motioncopy, prevframe, rotary
from suite.models.adapters import AdapterBase
from suite.models.capabilities import Capabilities
from suite.models.step import ANY_ROWS, on_cpu

PRIOR_FILE = "video_prior.json"
PROMPT = 2                                    # [motion, class]
SAMPLING = {"guidance_scale": 2.0, "temperature": 0.7, "top_k": 16}
# on a CPU, (at most rows, slots a row) of a step (guidance doubles the rows): a window of 16 guesses pays up to
# 8 clips, 4 at 12 (BENCHMARKS.md, "Video": sjd at 8 and 12 clips; more clips not measured)
CPU_ROW_WIDTHS = ((16, 17), (ANY_ROWS, 5))


@dataclass(frozen=True)
class VideoLayout:
    """Token ids, grid and attention window of a video prior (from its video_prior.json)."""

    codebook: int
    classes: int
    motions: int
    frames: int
    height: int
    width: int
    radius: int

    @classmethod
    def from_meta(cls, meta: dict) -> "VideoLayout":
        return cls(int(meta["codebook_size"]), len(meta["classes"]), len(meta["motions"]), int(meta["frames"]),
                   int(meta["grid"][0]), int(meta["grid"][1]), int(meta["radius"]))

    @property
    def cells(self) -> int:
        return self.height * self.width

    @property
    def null_class(self) -> int:
        return self.codebook + self.classes

    def motion_token(self, m: int) -> int:
        return self.codebook + self.classes + 1 + m

    @property
    def null_motion(self) -> int:
        return self.motion_token(self.motions)

    @property
    def bof(self) -> int:
        return self.null_motion + 1

    @property
    def vocab(self) -> int:
        return self.bof + 1

    @property
    def length(self) -> int:
        return PROMPT + self.frames * self.cells

    def motion_index(self, tokens: torch.Tensor) -> torch.Tensor:
        """Motion tokens -> motion indices 0..M (M: the null motion; anything else reads as null)."""
        m = tokens - self.motion_token(0)
        return torch.where((m >= 0) & (m <= self.motions), m, self.motions)

    def prompt(self, label: int, motion: int) -> list[int]:
        return [self.motion_token(motion), self.codebook + label]

    def position_ids(self, positions: torch.Tensor) -> torch.Tensor:
        """Logical positions (prompt 0, 1; cell j at P + j) -> the model's position ids."""
        return (positions - 1).clamp(min=0)

    def inputs(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """The model's input ids: a frame's last cell, held by the slot that predicts the next
        frame's first cell, is replaced by BOF."""
        held = positions - PROMPT
        last = (held >= 0) & ((held + 1) % self.cells == 0)
        return torch.where(last, torch.full_like(tokens, self.bof), tokens)

    def mask(self, query: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
        """(..., N) query and (..., S) key positions -> (..., N, S) bool: what the window lets a
        query see (causality aside: AND it with the decoder's mask)."""
        q, k = query[..., :, None], key[..., None, :]
        cq, ck = q + 1 - PROMPT, k + 1 - PROMPT              # the cell each slot predicts
        fq, fk = cq.div(self.cells, rounding_mode="floor"), ck.div(self.cells, rounding_mode="floor")
        held = k - PROMPT - (fq - 1) * self.cells             # key's held cell, inside frame t-1
        rq, colq = (cq % self.cells).div(self.width, rounding_mode="floor"), cq % self.width
        near = (held >= 0) & ((held.div(self.width, rounding_mode="floor") - rq).abs() <= self.radius) & \
               ((held % self.width - colq).abs() <= self.radius)
        start = (k >= PROMPT) & ((k - PROMPT + 1) % self.cells == 0)    # a frame-start slot: seen by itself only
        return (k < PROMPT) | ((fk == fq) & ~start) | ((fk == fq - 1) & near) | (k == q)

    def training_mask(self, length: int | None = None, device: torch.device | str = "cpu") -> torch.Tensor:
        """(L, L) bool on `device`: window AND causal, for whole sequences at positions 0..L-1."""
        pos = torch.arange(self.length if length is None else length, device=device)
        return self.mask(pos, pos) & (pos[None, :] <= pos[:, None])


def build_video_prior(layout: VideoLayout, hidden: int = 256, layers: int = 8, heads: int = 8,
                      positions: dict | None = None, inputs: dict | None = None, copy: dict | None = None):
    """A fresh Llama video prior; `positions`, `inputs`, `copy`: video_prior.json's entries (None:
    1-D rotary; no previous-frame inputs; no motion-told copy)."""
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(vocab_size=layout.vocab, hidden_size=hidden, intermediate_size=hidden * 3,
                      num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=heads,
                      max_position_embeddings=1 + layout.frames * layout.cells,
                      bos_token_id=None, eos_token_id=None, pad_token_id=None, tie_word_embeddings=False,
                      attn_implementation="sdpa")
    model = LlamaForCausalLM(cfg)
    rotary.install(model, layout.cells, positions)
    prevframe.install(model, layout, inputs, PROMPT)
    motioncopy.install(model, layout, copy, PROMPT)
    return model


def load_video_llama(folder: str, meta: dict):
    """The Llama of a video prior folder with its recorded position and input schemes installed,
    every weight read from the folder's safetensors (strictly: the previous-frame weights too,
    which transformers' own loader would skip)."""
    from safetensors.torch import load_file
    from transformers import LlamaConfig, LlamaForCausalLM
    model = LlamaForCausalLM(LlamaConfig.from_pretrained(folder)).float()
    layout = VideoLayout.from_meta(meta)
    rotary.install(model, layout.cells, meta.get("positions"))
    prevframe.install(model, layout, meta.get("inputs"), PROMPT)
    motioncopy.install(model, layout, meta.get("copy"), PROMPT)
    index = os.path.join(folder, SHARD_INDEX)
    files = sorted(set(read_json(index)["weight_map"].values())) if os.path.isfile(index) else ["model.safetensors"]
    state = {}
    for file in files:
        state.update(load_file(os.path.join(folder, file)))
    model.load_state_dict(state)
    return model


def code_logits(model, layout: VideoLayout, hidden: torch.Tensor, board: torch.Tensor, positions: torch.Tensor,
                motion: torch.Tensor) -> torch.Tensor:
    """(B, N, K) code logits of the last hidden states at `positions`: the code head, the
    previous-frame copy gates and the motion-told copy (each when installed); `motion`: (B,)
    motion indices."""
    out = prevframe.logits(model, hidden, board, positions, layout.codebook)
    told = motioncopy.module(model)
    return out if told is None else told(out, hidden, board, positions, motion)


def warm_start(model, image_prior, layout: VideoLayout) -> None:
    """Copy the image prior's transformer into `model`: code, class and null-class embeddings and
    the code head as they are; motion tokens start as the null class, BOF as the mean class."""
    src, dst = image_prior.state_dict(), model.state_dict()
    for name, value in src.items():
        if name in dst and dst[name].shape == value.shape:
            dst[name].copy_(value)
    k, c = layout.codebook, layout.classes
    emb = src["model.embed_tokens.weight"]
    new = dst["model.embed_tokens.weight"]
    new[:k + c + 1] = emb[:k + c + 1]
    new[layout.motion_token(0):layout.null_motion + 1] = emb[k + c] + 0.02 * torch.randn(layout.motions + 1, emb.shape[1],
                                                                                         device=emb.device)
    new[layout.bof] = emb[k:k + c].mean(0)
    head = dst["lm_head.weight"]
    head.zero_()
    head[:k] = src["lm_head.weight"][:k]
    model.load_state_dict(dst)


class VideoPrior(AdapterBase):
    """A `suite.ModelAdapter` over the Llama video prior: logits over the K codes only; the
    window mask and BOF inputs are applied here, so decoders see a plain causal LM over codes.
    config.extra: grid (H, W) of a frame, frames, video_grid (T, H, W), radius, classes, motions.
    The position scheme in meta["positions"] (if any) is installed on `model` here."""

    capabilities = Capabilities(custom_mask=True, row_moves=True)

    def __init__(self, model, meta: dict):
        self.layout = lay = VideoLayout.from_meta(meta)
        rotary.install(model, lay.cells, meta.get("positions"))
        prevframe.install(model, lay, meta.get("inputs"), PROMPT)
        motioncopy.install(model, lay, meta.get("copy"), PROMPT)
        self.reads_board = prevframe.module(model) is not None or motioncopy.module(model) is not None
        self.inner = HFCausalLM(model, eos_token_id=[], pad_token_id=0)
        self.model, self.meta = model, meta
        self.capabilities = replace(self.capabilities, row_widths=on_cpu(CPU_ROW_WIDTHS, self.device))
        self.codebook_size = lay.codebook
        self.config = AdapterConfig(vocab_size=lay.codebook, eos_token_ids=frozenset(), pad_token_id=0,
                                    max_length=lay.length,
                                    extra={"grid": (lay.height, lay.width), "frames": lay.frames,
                                           "video_grid": (lay.frames, lay.height, lay.width), "radius": lay.radius,
                                           "classes": tuple(meta["classes"]), "motions": tuple(meta["motions"]),
                                           "prompt_length": PROMPT})

    @property
    def device(self) -> torch.device:
        return self.inner.device

    def new_cache(self, batch: int, max_len: int | None = None) -> KVCache:
        cache = self.inner.new_cache(batch, max_len)
        if self.reads_board:                    # the tokens each row has fed, by position
            cache.row_inputs["board"] = torch.full((batch, self.layout.length), self.codebook_size,
                                                   dtype=torch.long, device=self.device)
        if motioncopy.module(self.model) is not None:     # each row's motion index, its guidance copy's beside
            cache.row_inputs["motion"] = torch.full((batch, 2), self.layout.motions, dtype=torch.long,
                                                    device=self.device)
        return cache

    def _motion(self, cache, tokens, positions) -> torch.Tensor:
        """Record the motion token of rows that feed position 0 (the k copies of a row under
        guidance each in its column); returns the (N,) motion index of every forward row. A padding
        slot also sits at position 0, with token 0 (a code): only a motion token there is a prompt."""
        motion = cache.row_inputs["motion"]
        rows = motion.shape[0]
        k = tokens.shape[0] // rows
        at = (positions == 0) & (tokens >= self.layout.motion_token(0)) & (tokens <= self.layout.null_motion)
        first = self.layout.motion_index(tokens.gather(1, at.int().argmax(1, keepdim=True))[:, 0]).reshape(k, rows).T
        fed = at.any(1)
        motion[:, :k] = torch.where(fed.reshape(k, rows).T, first, motion[:, :k])
        return motion[:, :k].T.reshape(-1)

    def _board(self, cache, tokens, positions) -> torch.Tensor:
        """Record the forward's tokens on the rows' boards; returns (B, L) boards where only
        fed tokens that the attention sees (live cache slots, this forward's) are kept."""
        board = cache.row_inputs["board"]
        n, rows = tokens.shape[0], board.shape[0]
        k = n // rows                          # 2 under CFG once rows were selected (codes match)
        board.scatter_(1, positions[:rows], tokens[:rows])
        seen = torch.zeros(n, board.shape[1] + 1, dtype=torch.bool, device=board.device)
        held = torch.where(cache.valid.to(board.device), cache.positions.to(board.device), board.shape[1])
        seen.scatter_(1, held, True)
        seen.scatter_(1, positions, True)
        return torch.where(seen[:, :-1], board.repeat(k, 1), self.codebook_size)

    def __call__(self, tokens, positions, cache, attention_mask, logits_from: int = 0):
        dev = self.device
        tokens, positions = tokens.to(dev), positions.to(dev)
        n = tokens.shape[1]
        if attention_mask is None:
            causal = torch.ones(n, n, dtype=torch.bool, device=dev).tril().expand(tokens.shape[0], n, n)
            attention_mask = cache.attention_mask(causal)
        keys = torch.cat([cache.positions.to(dev), positions], 1)                 # (B, S+N)
        mask = attention_mask.to(dev) & self.layout.mask(positions, keys)[:, None]
        ids, pos_ids = self.layout.inputs(tokens, positions), self.layout.position_ids(positions)
        if not self.reads_board:
            return self.inner(ids, pos_ids, cache, mask, logits_from)[..., :self.codebook_size]
        board = self._board(cache, tokens, positions)
        motion = self._motion(cache, tokens, positions) if motioncopy.module(self.model) is not None else None
        embeds = prevframe.embed(self.model, ids, board, positions)
        hidden = self.model.model(inputs_embeds=embeds, position_ids=pos_ids, cache=cache.backend,
                                  attention_mask=mask, use_cache=True).last_hidden_state[:, logits_from:]
        return code_logits(self.model, self.layout, hidden, board, positions[:, logits_from:], motion).to(hidden.dtype)

    @classmethod
    def load(cls, folder: str) -> "VideoPrior":
        from ..tokenizer import require_files
        sharded = os.path.isfile(os.path.join(folder, SHARD_INDEX))
        require_files(folder, ("config.json", SHARD_INDEX if sharded else "model.safetensors", PRIOR_FILE),
                      "python -m vision.video.train prior")
        try:
            meta = read_json(os.path.join(folder, PRIOR_FILE))
            model = load_video_llama(folder, meta)
        except Exception as e:
            raise ValueError(f"cannot load the video prior from {folder}: {e}; "
                             "re-create it with `python -m vision.video.train prior`") from e
        return cls(model.eval(), meta)
