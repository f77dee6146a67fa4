"""Training loop of the TTS models (called by `python -m speech.train tts` / `tts-flat`).

Data: the `tts` split (flite slt), phonemes from espeak-ng, codes from our codec.
Frame model: each example is laid out as DELAY or PARALLEL (coin flip), named by its first token.
Flat model: codes flattened frame by frame (T*Q positions).
"""
from __future__ import annotations

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
