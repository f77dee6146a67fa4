"""Training loop of the TTS models (called by `python -m speech.train tts` / `tts-flat`).

Data: the `tts` split (flite slt), phonemes from espeak-ng, codes from our codec.
Frame model: each example is laid out as DELAY or PARALLEL (coin flip), named by its first token.
Flat model: codes flattened frame by frame (T*Q positions).
"""
from __future__ import annotations

import math
import random
import time

import torch
import torch.nn.functional as F

from . import data
from .codec import Codec, _write_json
from .tts_model import WEIGHTS, TTSConfig, TTSModel, delay_pattern, flatten_codes


def encode_corpus(codec: Codec, items: list[dict]) -> list[torch.Tensor]:
    """codes (Q, T) per utterance, leading/trailing silence trimmed to 0.1 s."""
    out = []
    with torch.no_grad():
        for it in items:
            audio = torch.from_numpy(_trim(it["audio"]))
            out.append(codec.encode(audio[None])[0])
    return out


def _trim(audio, threshold: float = 0.01, margin: int = 1600):
    import numpy as np
    loud = np.nonzero(np.abs(audio) > threshold)[0]
    if len(loud) == 0:
        return audio
    return audio[max(loud[0] - margin, 0):loud[-1] + margin]


def fit_duration(symbol_counts: list[int], frame_counts: list[int]) -> tuple[float, float]:
    """Least squares frames = a * symbols + b."""
    x = torch.tensor(symbol_counts, dtype=torch.float64)
    y = torch.tensor(frame_counts, dtype=torch.float64)
    a = ((x - x.mean()) * (y - y.mean())).sum() / ((x - x.mean()) ** 2).sum()
    return float(a), float(y.mean() - a * x.mean())


def frame_example(cfg: TTSConfig, symbols: list[int], codes: torch.Tensor, delay: bool):
    """-> tokens (N, Q), targets (N, Q) with -100 where nothing is predicted, audio_start."""
    q, t = codes.shape
    text = torch.full((len(symbols) + 1, q), cfg.pad, dtype=torch.long)
    text[0, 0] = cfg.delay_token if delay else cfg.parallel_token
    text[1:, 0] = torch.tensor(symbols)
    bos = torch.full((1, q), cfg.bos, dtype=torch.long)
    if delay:
        cols = delay_pattern(codes, cfg.bos, cfg.eos, cfg.pad).T          # (T+Q, Q)
        target = cols.clone()
        target[(target == cfg.bos) | (target == cfg.pad)] = -100
        inputs = cols[:-1]
    else:
        target = torch.cat([codes.T, torch.full((1, q), cfg.eos, dtype=torch.long)])   # (T+1, Q)
        inputs = codes.T
    tokens = torch.cat([text, bos, inputs])
    targets = torch.cat([torch.full((len(text), q), -100, dtype=torch.long), target])
    return tokens, targets, len(text)


def flat_example(cfg: TTSConfig, symbols: list[int], codes: torch.Tensor):
    flat = flatten_codes(codes, cfg.codebook_size)
    tokens = torch.tensor(symbols + [cfg.bos] + flat.tolist())
    targets = torch.tensor([-100] * len(symbols) + flat.tolist() + [cfg.eos])
    return tokens, targets, len(symbols)


def collate(model: TTSModel, examples, num_symbols):
    cfg = model.config
    n = max(len(e[0]) for e in examples)
    tok = torch.stack([_pad_rows(e[0], n, cfg.pad) for e in examples])
    tgt = torch.stack([_pad_rows(e[1], n, -100) for e in examples])
    mask = torch.stack([torch.arange(n) < len(e[0]) for e in examples]).long()
    positions = torch.arange(n)[None].expand(len(examples), n)
    expected = torch.tensor([cfg.expected_frames(s) for s in num_symbols])
    progress = model.progress_ids(positions, torch.tensor([e[2] for e in examples]), expected)
    return tok, tgt, mask, positions, progress


def _pad_rows(x: torch.Tensor, n: int, value: int) -> torch.Tensor:
    """Pad (N,) or (N, Q) to n rows."""
    fill = torch.full((n - len(x),) + tuple(x.shape[1:]), value, dtype=x.dtype)
    return torch.cat([x, fill])


def train_tts(minutes: float, seed: int = 0, flat: bool = False, resume: bool = False, lr: float = 1e-3) -> dict:
    from .train import _cosine_lr, _progress
    torch.manual_seed(seed)
    rng = random.Random(seed)
    items = data.load_split("tts")
    codec = Codec.load()
    codes = encode_corpus(codec, items)
    symbols = "".join(sorted({ch for it in items for ch in it["phonemes"]}))
    a, b = fit_duration([len(it["phonemes"]) for it in items], [c.shape[1] for c in codes])
    cfg = TTSConfig(layout="flat" if flat else "frame", num_codebooks=codec.config.num_codebooks,
                    codebook_size=codec.config.codebook_size, symbols=symbols,
                    frames_per_symbol=a, frames_offset=b, hidden_size=192, num_layers=4, num_heads=4)
    folder = WEIGHTS / ("tts_flat" if flat else "tts")
    model = TTSModel.load(folder).train() if resume else TTSModel(cfg)   # resume: continue the shipped weights
    cfg = model.config
    sym = [cfg.symbol_ids(it["phonemes"]) for it in items]
    held = set(range(0, len(items), 50))                     # 2% kept aside for the validation loss
    train_idx = [i for i in range(len(items)) if i not in held]
    order = sorted(train_idx, key=lambda i: codes[i].shape[1])
    size = 8 if flat else 16
    batches = [order[i:i + size] for i in range(0, len(order), size)]
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01, betas=(0.9, 0.98))
    budget, t0, step = minutes * 60, time.time(), 0
    bar = _progress(budget, "tts-flat" if flat else "tts")
    model.train()
    while time.time() - t0 < budget:
        idx = rng.choice(batches)
        loss = batch_loss(model, [_example(cfg, sym[i], codes[i], rng, flat) for i in idx], [len(sym[i]) for i in idx])
        _cosine_lr(opt, lr * min(1.0, (step + 1) / 100), (time.time() - t0) / budget)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        if step % 10 == 0:
            bar.n = int(time.time() - t0)
            bar.set_postfix_str(f"step {step} loss {loss.item():.3f}")
            bar.refresh()
    bar.close()
    model.eval()
    with torch.no_grad():
        val = [batch_loss(model, [_example(cfg, sym[i], codes[i], random.Random(i), flat)], [len(sym[i])]).item()
               for i in sorted(held)]
    previous = _previous_metrics(folder) if resume else {}
    metrics = {"steps": step + previous.get("steps", 0), "train_minutes": minutes + previous.get("train_minutes", 0),
               "val_loss": sum(val) / len(val),
               "params_M": sum(p.numel() for p in model.parameters()) / 1e6}
    model.save(folder)
    _write_json(folder / "metrics.json", metrics)
    return metrics


def _example(cfg, symbols, codes, rng, flat):
    if flat:
        return flat_example(cfg, symbols, codes)
    return frame_example(cfg, symbols, codes, delay=rng.random() < 0.5)


def batch_loss(model: TTSModel, examples, num_symbols) -> torch.Tensor:
    tok, tgt, mask, positions, progress = collate(model, examples, num_symbols)
    logits = model(tok, progress, positions, mask)
    if logits.dim() == 3:
        logits, tgt = logits[:, :, None], tgt[..., None]
    # target at position i is what position i predicts (targets are already aligned to inputs)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1), ignore_index=-100)


def _previous_metrics(folder) -> dict:
    import json
    path = folder / "metrics.json"
    return json.loads(path.read_text()) if path.exists() else {}


# ---------------------------------------------------------------- heads: local transformer + stacked frames

def train_tts_heads(minutes: float, seed: int = 0, lr: float = 5e-4, out=None, source=None,
                    save_every_min: float = 5.0) -> dict:
    """Continue the frame TTS (its backbone and heads) and train a local transformer (local_ar,
    local_maskgit) and 2-frame stacked heads (stack) beside them. New heads learn at 3x `lr`.
    `source`: the checkpoint to continue (default: the shipped tts, or `out` if it has the heads).
    Checkpoints go to `out` every `save_every_min` minutes (resume by running again)."""
    from pathlib import Path
    from .train import _progress
    torch.manual_seed(seed)
    rng = random.Random(seed)
    out = Path(out) if out else WEIGHTS / "tts"
    if source is None:
        source = out if (out / "model.safetensors").exists() else WEIGHTS / "tts"
    model = TTSModel.load(source, local_layers=2, stack_frames=2)
    previous = _previous_metrics(Path(source))
    cfg = model.config
    items = data.load_split("tts")
    codes = encode_corpus(Codec.load(), items)
    sym = [cfg.symbol_ids(it["phonemes"]) for it in items]
    held = set(range(0, len(items), 50))
    order = sorted((i for i in range(len(items)) if i not in held), key=lambda i: codes[i].shape[1])
    batches = [order[i:i + 16] for i in range(0, len(order), 16)]
    new = {id(p) for n, p in model.named_parameters() if n.startswith(("local.", "stack_heads."))}
    groups = [{"params": [p for p in model.parameters() if id(p) not in new], "scale": 1.0},
              {"params": [p for p in model.parameters() if id(p) in new], "scale": 3.0}]
    opt = torch.optim.AdamW(groups, lr=lr, weight_decay=0.01, betas=(0.9, 0.98))
    budget, t0, step, last_save = minutes * 60, time.time(), 0, time.time()
    bar = _progress(budget, "tts-heads")
    model.train()
    while time.time() - t0 < budget:
        idx = rng.choice(batches)
        examples = [_heads_example(cfg, sym[i], codes[i], rng) for i in idx]
        losses = heads_losses(model, examples, [len(sym[i]) for i in idx], rng)
        loss = sum(losses.values())
        frac = (time.time() - t0) / budget
        for g in opt.param_groups:
            g["lr"] = g["scale"] * lr * min(1.0, (step + 1) / 50) * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * frac)))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        if step % 10 == 0:
            bar.n = int(time.time() - t0)
            bar.set_postfix_str(f"step {step} " + " ".join(f"{k} {v.item():.2f}" for k, v in losses.items()))
            bar.refresh()
        if time.time() - last_save > save_every_min * 60:
            model.eval()
            model.save(out)
            model.train()
            last_save = time.time()
    bar.close()
    model.eval()
    with torch.no_grad():
        val = {}
        for i in sorted(held):
            for delay in (False, True):
                ex = frame_example(cfg, sym[i], codes[i], delay=delay) + (delay,)
                for k, v in heads_losses(model, [ex], [len(sym[i])], random.Random(i)).items():
                    name = "val_delay" if (k == "frame" and delay) else f"val_{k}"
                    val.setdefault(name, []).append(v.item())
    metrics = {"steps": step + previous.get("steps", 0),
               "train_minutes": minutes + previous.get("train_minutes", 0),
               **{k: sum(v) / len(v) for k, v in val.items()},
               "params_M": sum(p.numel() for p in model.parameters()) / 1e6}
    model.save(out)
    _write_json(out / "metrics.json", metrics)
    return metrics


def _heads_example(cfg, symbols, codes, rng):
    """Two thirds PARALLEL (the layout the new heads read), one third DELAY (kept alive)."""
    delay = rng.random() < 1 / 3
    return frame_example(cfg, symbols, codes, delay=delay) + (delay,)


def heads_losses(model: TTSModel, examples, num_symbols, rng, local_frames: int = 768) -> dict:
    """CE (nats per code) of: the frame heads (both layouts), the stacked heads (frame after next),
    the local transformer run causally (ar) and as masked prediction (maskgit); parallel rows only
    for the last three."""
    tok, tgt, mask, positions, progress = collate(model, [e[:3] for e in examples], num_symbols)
    h = model.hidden(tok, progress, positions, mask)                          # (B, N, D)
    out = {"frame": ce(model.head_logits(h), tgt)}
    parallel = torch.tensor([not e[3] for e in examples])
    if not parallel.any():
        return out
    later = torch.cat([tgt[:, 1:], torch.full_like(tgt[:, :1], -100)], 1)     # (B, N, Q): the frame after next
    later[~parallel] = -100
    later[tgt[..., 0] == -100] = -100                                         # text positions predict no frame
    out["stack"] = ce(model.stack_logits(h)[:, :, 1], later)
    rows = (tgt[..., 0] != -100) & parallel[:, None]                          # (B, N) positions with a target frame
    hs, ts = h[rows], tgt[rows]                                               # (M, D), (M, Q)
    if len(hs) > local_frames:
        pick = torch.randperm(len(hs), generator=torch.Generator().manual_seed(rng.randrange(2 ** 31)))[:local_frames]
        hs, ts = hs[pick], ts[pick]
    out["local_ar"] = ce(model.local_logits(hs, ts, "ar"), ts)
    out["local_maskgit"] = _maskgit_loss(model, hs, ts, rng, ce)
    return out


def ce(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of (..., V) logits against (...) targets, -100 ignored."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=-100)


def _maskgit_loss(model, hs, ts, rng, ce):
    """Mask ceil(cos(u pi/2) Q) codebooks per frame (u uniform, MaskGIT's schedule); predict them."""
    m, q = ts.shape
    g = torch.Generator().manual_seed(rng.randrange(2 ** 31))
    u = torch.rand(m, generator=g)
    count = torch.ceil(torch.cos(u * math.pi / 2) * q).clamp(1, q)           # (M,)
    rank = torch.rand(m, q, generator=g).argsort(1).argsort(1)               # random order per frame
    masked = rank < count[:, None]
    inputs = torch.where(masked, torch.full_like(ts, model.config.out_vocab), ts)
    return ce(model.local_logits(hs, inputs, "maskgit"), torch.where(masked, ts, torch.full_like(ts, -100)))
