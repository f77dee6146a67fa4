"""The class-conditional AR image prior (LlamaGen-style) and its `suite` adapter.

A transformers `LlamaForCausalLM` over `[class token] + H*W codes` in raster order. Token ids:
codes 0..K-1, class c -> K + c, the null class (classifier-free guidance) -> K + C, and, once
trained for LPD (`vision.position_queries`), the position query of cell i -> K + C + 1 + i. The
adapter exposes only the K code logits and tells decoders the grid through `config.extra`.
"""
from __future__ import annotations

import json
import os
import time

import torch

from suite import AdapterConfig, HFCausalLM, KVCache

PRIOR_FILE = "image_prior.json"
SHARD_SIZE = "15MB"                        # each weight file stays well under 20 MB
SHARD_INDEX = "model.safetensors.index.json"   # present when the weights span several files
SAMPLING = {"guidance_scale": 2.0, "temperature": 0.7, "top_k": 16}   # shipped defaults (guidance swept on class accuracy)


def build_prior(codebook: int, num_classes: int, grid: tuple[int, int], hidden: int = 128, layers: int = 4,
                heads: int = 4, extra_positions: int = 0):
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(vocab_size=codebook + num_classes + 1, hidden_size=hidden, intermediate_size=hidden * 3,
                      num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=heads,
                      max_position_embeddings=1 + grid[0] * grid[1] + extra_positions,
                      bos_token_id=None, eos_token_id=None, pad_token_id=None, tie_word_embeddings=False,
                      attn_implementation="sdpa")
    return LlamaForCausalLM(cfg)


class ImagePrior:
    """A `suite.ModelAdapter` over the Llama prior: logits over the K codes only; the config's
    extra carries grid (H, W), classes, null_class_id, class_offset."""

    supports_custom_mask = True
    supports_rollback = True

    def __init__(self, model, meta: dict):
        self.inner = HFCausalLM(model, eos_token_id=[], pad_token_id=0)
        self.model = model
        self.meta = meta
        self.codebook_size = int(meta["codebook_size"])
        grid = tuple(meta["grid"])
        self.config = AdapterConfig(vocab_size=self.codebook_size, eos_token_ids=frozenset(), pad_token_id=0,
                                    max_length=1 + grid[0] * grid[1],
                                    extra={"grid": grid, "classes": tuple(meta["classes"]),
                                           "class_offset": self.codebook_size,
                                           "null_class_id": self.codebook_size + len(meta["classes"]),
                                           "query_offset": meta.get("query_offset")})   # LPD position queries

    @property
    def grid(self) -> tuple[int, int]:
        return self.config.extra["grid"]

    def class_token(self, label: int) -> int:
        return self.codebook_size + label

    def new_cache(self, batch: int, max_len: int | None = None) -> KVCache:
        return self.inner.new_cache(batch, max_len)

    def __call__(self, tokens, positions, cache, attention_mask, logits_from: int = 0):
        return self.inner(tokens, positions, cache, attention_mask, logits_from)[..., :self.codebook_size]

    @classmethod
    def load(cls, folder: str) -> "ImagePrior":
        from transformers import LlamaForCausalLM
        from .tokenizer import _require_files
        sharded = os.path.isfile(os.path.join(folder, SHARD_INDEX))
        _require_files(folder, ("config.json", SHARD_INDEX if sharded else "model.safetensors", PRIOR_FILE),
                       "python -m vision.train prior")
        try:
            with open(os.path.join(folder, PRIOR_FILE)) as f:
                meta = json.load(f)
            model = LlamaForCausalLM.from_pretrained(folder, dtype=torch.float32)   # fp32 whatever the file holds
        except Exception as e:
            raise ValueError(f"cannot load the image prior from {folder}: {e}; "
                             "re-create it with `python -m vision.train prior`") from e
        return cls(model.eval(), meta)


# ---------------------------------------------------------------- training

def save_prior(model, folder: str) -> None:
    """The Llama's fp32 weights as safetensors shards of at most SHARD_SIZE (from any device)."""
    model.to("cpu").save_pretrained(folder, safe_serialization=True, max_shard_size=SHARD_SIZE)


def encode_split(tokenizer, images, batch: int = 100) -> torch.Tensor:
    """(N, H, W, 3) uint8 -> (N, h, w) codes (on the CPU, whatever device the tokenizer is on)."""
    from .data import to_tensor
    device = next(tokenizer.vq.parameters()).device
    out = [tokenizer.encode(to_tensor(images[i:i + batch]).to(device)).cpu() for i in range(0, len(images), batch)]
    return torch.cat(out)


def cached_codes(tokenizer, images, tokenizer_folder: str, per_class: int) -> torch.Tensor:
    """Codes of the training split, cached in the temp folder per tokenizer file version."""
    import hashlib
    import tempfile
    st = os.stat(os.path.join(tokenizer_folder, "diffusion_pytorch_model.safetensors"))
    key = hashlib.sha1(f"{st.st_size}-{st.st_mtime_ns}-{per_class}".encode()).hexdigest()[:16]
    path = os.path.join(tempfile.gettempdir(), f"parasuite-vision-codes-{key}.pt")
    if os.path.exists(path):
        return torch.load(path)
    codes = encode_split(tokenizer, images)
    torch.save(codes, path + ".tmp")
    os.replace(path + ".tmp", path)
    return codes


def train_prior_model(args) -> None:
    from . import data as vdata
    from .train import WEIGHTS, _log, _lr, _swap_in, _write_json, progress, training_device
    from .tokenizer import VQTokenizer
    import tempfile
    torch.manual_seed(args.seed)
    device = training_device(args.device)
    tok = VQTokenizer.load(os.path.join(WEIGHTS, "tokenizer"))
    tok.vq.to(device)
    images, labels = vdata.make_split("train", args.per_class)
    t0 = time.time()
    codes = cached_codes(tok, images, os.path.join(WEIGHTS, "tokenizer"), args.per_class)   # (N, H, W)
    n, h, w = codes.shape
    _log(f"encoded {n} images to {h}x{w} codes in {time.time() - t0:.0f}s")
    k, c = tok.codebook_size, len(vdata.CLASSES)
    prev_steps = 0
    if getattr(args, "resume", False):
        from transformers import LlamaForCausalLM
        from .train import _previous_steps
        folder = os.path.join(WEIGHTS, "prior")
        model = LlamaForCausalLM.from_pretrained(folder, dtype=torch.float32)
        prev_steps = _previous_steps(folder)
        _log(f"resuming from {folder} ({prev_steps} steps)")
    else:
        model = build_prior(k, c, (h, w), hidden=args.hidden, layers=args.layers, heads=args.heads)
    model.to(device)
    _log(f"prior: {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters")
    seqs = torch.cat([(labels[:, None] if torch.is_tensor(labels) else torch.from_numpy(labels)[:, None]) + k,
                      codes.reshape(n, -1)], 1).to(device)   # (N, 1 + H*W)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01, betas=(0.9, 0.95))
    model.train()
    t0 = time.time()
    for step in range(args.steps):
        for g in opt.param_groups:
            g["lr"] = _lr(progress(step, args, t0), step, args.lr)
        x = seqs[torch.randint(n, (args.batch,), device=device)].clone()
        drop = torch.rand(args.batch, device=device) < 0.1    # null class for classifier-free guidance
        x[drop, 0] = k + c
        logits = model(input_ids=x[:, :-1]).logits[..., :k]   # predict codes only
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, k), x[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 50 == 0:
            _log(f"prior step {step}/{args.steps} loss {loss.item():.4f} {time.time() - t0:.0f}s")
        if progress(step, args, t0) >= 1.0:
            _log(f"time budget reached at step {step}")
            break
    model.eval()
    test, test_labels = vdata.make_split("test", 20)
    tc = encode_split(tok, test)
    ts = torch.cat([torch.from_numpy(test_labels)[:, None] + k, tc.reshape(len(tc), -1)], 1).to(device)
    with torch.no_grad():
        tl = model(input_ids=ts[:, :-1]).logits[..., :k]
        test_loss = float(torch.nn.functional.cross_entropy(tl.reshape(-1, k), ts[:, 1:].reshape(-1)))
    _log(f"test loss {test_loss:.4f} nats/token")
    meta = {"codebook_size": k, "classes": list(vdata.CLASSES), "grid": [h, w], "order": "raster",
            "image_size": vdata.SIZE, "sampling": SAMPLING}
    if getattr(args, "resume", False):      # a resumed prior keeps its LPD query tokens
        with open(os.path.join(WEIGHTS, "prior", PRIOR_FILE)) as f:
            old = json.load(f)
        meta.update({key: old[key] for key in ("query_offset", "lpd", "zipar_views", "sampling") if key in old})
    tmp = tempfile.mkdtemp(dir=WEIGHTS, prefix=".prior-")
    save_prior(model, tmp)
    _write_json(os.path.join(tmp, PRIOR_FILE), meta)
    _write_json(os.path.join(tmp, "metrics.json"), {"test_loss": test_loss, "train_loss": float(loss.detach()),
                                                    "steps": prev_steps + step + 1,
                                                    "seconds": time.time() - t0})
    _swap_in(tmp, os.path.join(WEIGHTS, "prior"))
