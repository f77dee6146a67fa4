"""The class-conditional AR image prior (LlamaGen-style) and its `suite` adapter.

A transformers `LlamaForCausalLM` over `[class token] + H*W codes` in raster order. Token ids:
codes 0..K-1, class c -> K + c, the null class (classifier-free guidance) -> K + C, and, once
trained for LPD (`vision.position_queries`), the position query of cell i -> K + C + 1 + i. The
adapter exposes only the K code logits and tells decoders the grid through `config.extra`.
"""
from __future__ import annotations

import hashlib
import os
import tempfile
import time
from dataclasses import replace

import torch

from suite import AdapterConfig, HFCausalLM, KVCache
from suite.runtime.storage import atomic_folder, atomic_path, read_json, write_json
from suite.runtime.training import Budget, log, optimizer_step, previous_metrics, set_learning_rate, training_device, \
    warmup_cosine

from . import data as vdata
from .tokenizer import VQTokenizer, require_files
from suite.models.adapters import AdapterBase
from suite.models.capabilities import Capabilities
from suite.models.step import ANY_ROWS, on_cpu

PRIOR_FILE = "image_prior.json"
SHARD_SIZE = "15MB"                        # each weight file stays well under 20 MB
SHARD_INDEX = "model.safetensors.index.json"   # present when the weights span several files
SAMPLING = {"guidance_scale": 2.0, "temperature": 0.7, "top_k": 16}   # shipped defaults (guidance swept on class accuracy)
# on a CPU, (at most rows, slots a row) of a step (guidance doubles the rows): a window of 16 guesses pays for one
# image, 4 for up to four, none past that (BENCHMARKS.md, "Images": sjd at 2, 4, 8 and 20 rows)
CPU_ROW_WIDTHS = ((4, 17), (8, 5), (ANY_ROWS, 1))


def build_prior(codebook: int, num_classes: int, grid: tuple[int, int], hidden: int = 128, layers: int = 4,
                heads: int = 4, extra_positions: int = 0):
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(vocab_size=codebook + num_classes + 1, hidden_size=hidden, intermediate_size=hidden * 3,
                      num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=heads,
                      max_position_embeddings=1 + grid[0] * grid[1] + extra_positions,
                      bos_token_id=None, eos_token_id=None, pad_token_id=None, tie_word_embeddings=False,
                      attn_implementation="sdpa")
    return LlamaForCausalLM(cfg)


class ImagePrior(AdapterBase):
    """A `suite.ModelAdapter` over the Llama prior: logits over the K codes only; the config's
    extra carries grid (H, W), classes, null_class_id, class_offset."""

    capabilities = Capabilities(custom_mask=True, plain_mask=True, row_moves=True)

    def __init__(self, model, meta: dict):
        self.inner = HFCausalLM(model, eos_token_id=[], pad_token_id=0)
        self.model = model
        self.capabilities = replace(self.capabilities, row_widths=on_cpu(CPU_ROW_WIDTHS, self.device))
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
    def device(self) -> torch.device:
        return self.inner.device

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
        return cls(*load_llama_prior(folder, PRIOR_FILE, "image prior", "python -m vision.train prior"))


def load_llama_prior(folder: str, meta_file: str, what: str, fix: str):
    """(the fp32 Llama in `folder`, one file or shards, in eval mode; its meta JSON `meta_file`);
    a missing or unreadable file fails with `fix`, the command that re-creates the folder."""
    from transformers import LlamaForCausalLM
    sharded = os.path.isfile(os.path.join(folder, SHARD_INDEX))
    require_files(folder, ("config.json", SHARD_INDEX if sharded else "model.safetensors", meta_file), fix)
    try:
        meta = read_json(os.path.join(folder, meta_file))
        model = LlamaForCausalLM.from_pretrained(folder, dtype=torch.float32)   # fp32 whatever the file holds
    except Exception as e:
        raise ValueError(f"cannot load the {what} from {folder}: {e}; re-create it with `{fix}`") from e
    return model.eval(), meta


# ---------------------------------------------------------------- training

def save_prior(model, folder: str) -> None:
    """The Llama's fp32 weights as safetensors shards of at most SHARD_SIZE (from any device)."""
    model.to("cpu").save_pretrained(folder, safe_serialization=True, max_shard_size=SHARD_SIZE)


def encode_split(tokenizer, images, batch: int = 100) -> torch.Tensor:
    """(N, H, W, 3) uint8 -> (N, h, w) codes (on the CPU, whatever device the tokenizer is on)."""
    device = next(tokenizer.vq.parameters()).device
    out = [tokenizer.encode(vdata.to_tensor(images[i:i + batch]).to(device)).cpu() for i in range(0, len(images), batch)]
    return torch.cat(out)


def cached_codes(tokenizer, images, tokenizer_folder: str, per_class: int) -> torch.Tensor:
    """Codes of the training split, cached in the temp folder per tokenizer file version."""
    st = os.stat(os.path.join(tokenizer_folder, "diffusion_pytorch_model.safetensors"))
    key = hashlib.sha1(f"{st.st_size}-{st.st_mtime_ns}-{per_class}".encode()).hexdigest()[:16]
    path = os.path.join(tempfile.gettempdir(), f"parasuite-vision-codes-{key}.pt")
    if os.path.exists(path):
        return torch.load(path)
    codes = encode_split(tokenizer, images)
    with atomic_path(path) as tmp:
        torch.save(codes, tmp)
    return codes


def train_prior_model(args, weights: str) -> None:
    """The raster prior over the codes of `weights`/tokenizer -> `weights`/prior."""
    torch.manual_seed(args.seed)
    device = training_device(args.device)
    folder = os.path.join(weights, "prior")
    tok = VQTokenizer.load(os.path.join(weights, "tokenizer"))
    tok.vq.to(device)
    images, labels = vdata.make_split("train", args.per_class)
    t0 = time.time()
    codes = cached_codes(tok, images, os.path.join(weights, "tokenizer"), args.per_class)   # (N, H, W)
    n, h, w = codes.shape
    log(f"encoded {n} images to {h}x{w} codes in {time.time() - t0:.0f}s")
    k, c = tok.codebook_size, len(vdata.CLASSES)
    prev_steps = 0
    if getattr(args, "resume", False):
        from transformers import LlamaForCausalLM
        model = LlamaForCausalLM.from_pretrained(folder, dtype=torch.float32)
        prev_steps = int(previous_metrics(folder).get("steps", 0))
        log(f"resuming from {folder} ({prev_steps} steps)")
    else:
        model = build_prior(k, c, (h, w), hidden=args.hidden, layers=args.layers, heads=args.heads)
    model.to(device)
    log(f"prior: {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters")
    seqs = torch.cat([(labels[:, None] if torch.is_tensor(labels) else torch.from_numpy(labels)[:, None]) + k,
                      codes.reshape(n, -1)], 1).to(device)   # (N, 1 + H*W)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01, betas=(0.9, 0.95))
    model.train()
    budget = Budget(args.minutes, args.steps)
    for step in range(args.steps):
        set_learning_rate(opt, warmup_cosine(args.lr, step, budget.progress(step), warmup=50))
        x = seqs[torch.randint(n, (args.batch,), device=device)].clone()
        drop = torch.rand(args.batch, device=device) < 0.1    # null class for classifier-free guidance
        x[drop, 0] = k + c
        logits = model(input_ids=x[:, :-1]).logits[..., :k]   # predict codes only
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, k), x[:, 1:].reshape(-1))
        optimizer_step(opt, loss)
        if step % 50 == 0:
            log(f"prior step {step}/{args.steps} loss {loss.item():.4f} {budget.elapsed_s:.0f}s")
        if budget.over(step):
            break
    model.eval()
    test, test_labels = vdata.make_split("test", 20)
    tc = encode_split(tok, test)
    ts = torch.cat([torch.from_numpy(test_labels)[:, None] + k, tc.reshape(len(tc), -1)], 1).to(device)
    with torch.no_grad():
        tl = model(input_ids=ts[:, :-1]).logits[..., :k]
        test_loss = float(torch.nn.functional.cross_entropy(tl.reshape(-1, k), ts[:, 1:].reshape(-1)))
    log(f"test loss {test_loss:.4f} nats/token")
    meta = {"codebook_size": k, "classes": list(vdata.CLASSES), "grid": [h, w], "order": "raster",
            "image_size": vdata.SIZE, "sampling": SAMPLING}
    if getattr(args, "resume", False):      # a resumed prior keeps its LPD query tokens
        old = read_json(os.path.join(folder, PRIOR_FILE))
        meta.update({key: old[key] for key in ("query_offset", "lpd", "zipar_views", "sampling") if key in old})
    with atomic_folder(folder) as tmp:
        save_prior(model, tmp)
        write_json(tmp / PRIOR_FILE, meta, indent=1)
        write_json(tmp / "metrics.json", {"test_loss": test_loss, "train_loss": float(loss.detach()),
                                          "steps": prev_steps + step + 1, "seconds": budget.elapsed_s}, indent=1)
