"""Training loop of the TTS models (called by `python -m speech.train tts` / `tts-flat`).

Data: the `tts` split (flite slt), codes from our codec, phones and their timings from flite
(speech/alignment.py): every audio position is conditioned on its frame's phone.
Frame model: each example is laid out as DELAY (1/3) or PARALLEL (2/3), named by its first token;
one run trains the backbone, the frame heads, the 2-frame stacked heads (stack), the local
transformer (local_ar, local_maskgit; on PARALLEL rows) and the duration predictor together.
Stack model (`tts-stack`): the PARALLEL layout, the stacked heads and a local transformer over
the next two frames (stack_local).
Flat model: codes flattened frame by frame (T*Q positions), the same conditioning.
"""
from __future__ import annotations

import functools
import math
import random
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from suite.runtime.storage import write_json
from suite.runtime.training import Budget, ClockBar, optimizer_step, previous_metrics, set_learning_rate, warmup_cosine

from . import data
from .alignment import PHONES, MAX_COUNT, durations, flite_phones, frame_conditioning, frame_phones
from .codec import Codec
from suite.decoders.frames.delay import delay_pattern

from .tts_model import WEIGHTS, TTSConfig, TTSModel, flatten_codes


def encode_corpus(codec: Codec, items: list[dict]) -> tuple[list[torch.Tensor], list[int]]:
    """codes (Q, T) per utterance, leading/trailing silence trimmed to 0.1 s; and each trim's first sample."""
    out, starts = [], []
    with torch.no_grad():
        for it in items:
            start, end = _trim(it["audio"])
            out.append(codec.encode(torch.from_numpy(it["audio"][start:end])[None])[0])
            starts.append(start)
    return out, starts


def _trim(audio, threshold: float = 0.01, margin: int = 1600) -> tuple[int, int]:
    import numpy as np
    loud = np.nonzero(np.abs(audio) > threshold)[0]
    if len(loud) == 0:
        return 0, len(audio)
    return max(loud[0] - margin, 0), loud[-1] + margin


def corpus_phones(items: list[dict], piper: bool = True) -> list[list[tuple[str, float]]]:
    """flite's (phone, end time) of every item's text, cached beside the data."""
    return data.cached_json(f"tts_phones-{len(items)}.json", lambda: [flite_phones(it["text"]) for it in items],
                            piper)


def prepare(items: list[dict], codec: Codec, cfg: TTSConfig, piper: bool = True):
    """-> codes (Q, T), conditioning (T, 5), phone ids (P,), frames per phone (P,) per utterance."""
    codes, starts = encode_corpus(codec, items)
    tables, ids, durs = [], [], []
    for c, start, phones in zip(codes, starts, corpus_phones(items, piper)):
        pid = cfg.phone_ids([p for p, _ in phones])
        which = frame_phones([e for _, e in phones], c.shape[1], start / data.SAMPLE_RATE, codec.config.frame_rate)
        d = durations(which, len(pid))
        tables.append(frame_conditioning(pid, d, none_id=len(cfg.phones)))
        ids.append(pid)
        durs.append(d)
    return codes, tables, ids, durs


def frame_example(cfg: TTSConfig, codes: torch.Tensor, delay: bool):
    """-> tokens (N, Q), targets (N, Q) with -100 where nothing is predicted, audio_start (BOS position)."""
    q, t = codes.shape
    layout = torch.full((1, q), cfg.pad, dtype=torch.long)
    layout[0, 0] = cfg.delay_token if delay else cfg.parallel_token
    bos = torch.full((1, q), cfg.bos, dtype=torch.long)
    if delay:
        cols = delay_pattern(codes, cfg.bos, cfg.eos, cfg.pad).T          # (T+Q, Q)
        target = cols.clone()
        target[(target == cfg.bos) | (target == cfg.pad)] = -100
        inputs = cols[:-1]
    else:
        target = torch.cat([codes.T, torch.full((1, q), cfg.eos, dtype=torch.long)])   # (T+1, Q)
        inputs = codes.T
    tokens = torch.cat([layout, bos, inputs])
    targets = torch.cat([torch.full((1, q), -100, dtype=torch.long), target])
    return tokens, targets, 1


def flat_example(cfg: TTSConfig, codes: torch.Tensor):
    flat = flatten_codes(codes, cfg.codebook_size).tolist()
    return torch.tensor([cfg.bos] + flat), torch.tensor(flat + [cfg.eos]), 0


def collate(model: TTSModel, examples, tables):
    cfg = model.config
    n = max(len(e[0]) for e in examples)
    tok = torch.stack([_pad_rows(e[0], n, cfg.pad) for e in examples])
    tgt = torch.stack([_pad_rows(e[1], n, -100) for e in examples])
    mask = torch.stack([torch.arange(n) < len(e[0]) for e in examples]).long()
    positions = torch.arange(n)[None].expand(len(examples), n)
    cond = model.condition_ids(positions, torch.tensor([e[2] for e in examples]), tables)
    return tok, tgt, mask, positions, cond


def _pad_rows(x: torch.Tensor, n: int, value: int) -> torch.Tensor:
    """Pad (N,) or (N, Q) to n rows."""
    fill = torch.full((n - len(x),) + tuple(x.shape[1:]), value, dtype=x.dtype)
    return torch.cat([x, fill])


KINDS = {"frame": "tts", "flat": "tts_flat", "delay": "tts_delay", "stack": "tts_stack"}   # kind -> weights folder


def train_tts(minutes: float, seed: int = 0, kind: str = "frame", resume: bool = False, lr: float = 1e-3,
              out=None, save_every_min: float = 5.0, delay_share: float = 1 / 3, keep_best: bool = False,
              num_tts: int = data.NUM_TTS, piper: bool = True) -> dict:
    """Train the frame model (all heads + duration predictor), the flat model, the delay model (the
    frame backbone on the DELAY layout alone, for the `delay` decoder) or the stack model (the
    PARALLEL layout with the stacked heads and the two-frame local transformer, for `stack` and
    `stack_local`) for `minutes` of wall clock;
    checkpoints go to `out` (default speech/weights/<KINDS[kind]>) every `save_every_min` minutes.
    resume: continue `out`'s checkpoint (its steps and minutes add up). delay_share: the fraction of
    frame-model examples drawn in the DELAY layout (else parallel). keep_best: a checkpoint is
    written only when its validation loss (summed over the heads) beats the best so far, so the
    folder ends with the best one (the single-decoder models over-fitted the 1500-utterance split).
    num_tts: the size of the `tts` split trained on; piper: the data folder with or without the
    Piper voice (speech/data.py; the `tts` split is flite either way)."""
    torch.manual_seed(seed)
    rng = random.Random(seed)
    items = data.load_split("tts", num_tts, piper)
    codec = Codec.load()
    flat = kind == "flat"
    delay_share = {"delay": 1.0, "stack": 0.0}.get(kind, delay_share)
    folder = Path(out) if out else WEIGHTS / KINDS[kind]
    cfg = TTSConfig(layout="flat" if flat else "frame", num_codebooks=codec.config.num_codebooks,
                    codebook_size=codec.config.codebook_size, symbols=" ".join(PHONES), max_count=MAX_COUNT,
                    hidden_size=192, num_layers=4, num_heads=4,
                    **{"frame": {"local_layers": 2, "stack_frames": 2, "duration_hidden": 128},
                       "stack": {"stack_frames": 2, "local_layers": 2, "local_frames": 2}}.get(kind, {}))
    model = TTSModel.load(folder).train() if resume else TTSModel(cfg)
    cfg = model.config
    previous = previous_metrics(folder) if resume else {}
    codes, tables, ids, durs = prepare(items, codec, cfg, piper)
    held = set(range(0, len(items), 50))                     # 2% kept aside for the validation loss
    order = sorted((i for i in range(len(items)) if i not in held), key=lambda i: codes[i].shape[1])
    size = 8 if flat else 16
    batches = [order[i:i + size] for i in range(0, len(order), size)]
    new = {id(p) for n, p in model.named_parameters() if n.startswith(("local.", "stack_heads.", "duration."))}
    groups = [{"params": [p for p in model.parameters() if id(p) not in new], "scale": 1.0},
              {"params": [p for p in model.parameters() if id(p) in new], "scale": 2.0}]
    opt = torch.optim.AdamW(groups, lr=lr, weight_decay=0.01, betas=(0.9, 0.98))
    validate = functools.partial(validation_losses, model, kind, held, codes, tables, ids, durs)
    budget, step, last_save, best = Budget(minutes), 0, time.time(), None
    bar = ClockBar(minutes * 60, "tts" if kind == "frame" else f"tts-{kind}")
    model.train()
    while not budget.spent():
        idx = rng.choice(batches)
        losses = _losses(model, idx, codes, tables, ids, durs, rng, delay_share=delay_share)
        loss = sum(losses.values())
        set_learning_rate(opt, warmup_cosine(lr, step, budget.progress(), warmup=100))   # times each group's scale
        optimizer_step(opt, loss, model.parameters())
        step += 1
        if step % 10 == 0:
            bar.show(budget.elapsed_s, f"step {step} " + " ".join(f"{k} {v.item():.2f}" for k, v in losses.items()))
        if time.time() - last_save > save_every_min * 60:
            best = _checkpoint(model, folder, validate, keep_best, best, step)
            last_save = time.time()
    bar.close()
    best = _checkpoint(model, folder, validate, keep_best, best, step, final=True)
    metrics = {"steps": best["step"] + previous.get("steps", 0),
               "train_minutes": minutes + previous.get("train_minutes", 0), **best["val"],
               "params_M": sum(p.numel() for p in model.parameters()) / 1e6, "tts_utterances": len(items)}
    if keep_best:
        metrics["kept_best_of_steps"] = step
    write_json(folder / "metrics.json", metrics)
    return metrics


def _checkpoint(model, folder, validate, keep_best: bool, best: dict | None, step: int,
                final: bool = False) -> dict | None:
    """Save the model to `folder` (with keep_best: only if its validation loss, `validate()`, beats
    `best`'s); returns the checkpoint now in the folder: {"step", "val"} (val measured with
    keep_best or at the end)."""
    model.eval()
    val = validate() if keep_best or final else None
    if not keep_best or best is None or sum(val.values()) < sum(best["val"].values()):
        model.save(folder)
        best = {"step": step, "val": val}
    model.train()
    return best


def validation_losses(model, kind, held, codes, tables, ids, durs) -> dict:
    """Mean validation loss of each head over the held-out utterances (nats per code)."""
    val = {}
    with torch.no_grad():
        for i in sorted(held):
            for delay in {"flat": (None,), "frame": (False, True), "delay": (True,), "stack": (False,)}[kind]:
                for k, v in _losses(model, [i], codes, tables, ids, durs, random.Random(i), delay).items():
                    name = "val_delay" if (k == "frame" and delay) else f"val_{k}"
                    val.setdefault(name, []).append(v.item())
    return {k: sum(v) / len(v) for k, v in val.items()}


def _losses(model, idx, codes, tables, ids, durs, rng, delay=None, delay_share=1 / 3) -> dict:
    """The model's training losses on utterances idx (delay: force the frame layout, else drawn:
    DELAY with probability delay_share)."""
    cfg = model.config
    tabs = [tables[i] for i in idx]
    if cfg.layout == "flat":
        tok, tgt, mask, positions, cond = collate(model, [flat_example(cfg, codes[i]) for i in idx], tabs)
        return {"flat": ce(model(tok, cond, positions, mask), tgt)}
    examples = []
    for i in idx:
        d = (rng.random() < delay_share) if delay is None else delay
        examples.append(frame_example(cfg, codes[i], d) + (d,))
    out = heads_losses(model, examples, tabs, rng)
    if not cfg.duration_hidden:
        return out
    p = max(len(ids[i]) for i in idx)
    pad = model.duration.embed.num_embeddings - 1
    pid = torch.tensor([ids[i] + [pad] * (p - len(ids[i])) for i in idx])
    frames = torch.stack([F.pad(durs[i], (0, p - len(durs[i]))) for i in idx])
    out["duration"] = model.duration.loss(pid, frames)
    return out


# ---------------------------------------------------------------- frame model: all heads

def heads_losses(model: TTSModel, examples, tables, rng, local_frames: int = 768) -> dict:
    """CE (nats per code) of: the frame heads (both layouts), the stacked heads (frame after next),
    the local transformer run causally (ar) and as masked prediction (maskgit), or, when it spans
    two frames, causally over the next frame and the one after (stack_local); parallel rows only
    for all but the first."""
    tok, tgt, mask, positions, cond = collate(model, [e[:3] for e in examples], tables)
    h = model.hidden(tok, cond, positions, mask)                              # (B, N, D)
    out = {"frame": ce(model.head_logits(h), tgt)}
    parallel = torch.tensor([not e[3] for e in examples])
    if not parallel.any():
        return out
    later = torch.cat([tgt[:, 1:], torch.full_like(tgt[:, :1], -100)], 1)     # (B, N, Q): the frame after next
    later[~parallel] = -100
    later[tgt[..., 0] == -100] = -100                                         # prompt positions predict no frame
    out["stack"] = ce(model.stack_logits(h)[:, :, 1], later)
    if not model.config.local_layers:
        return out
    rows = (tgt[..., 0] != -100) & parallel[:, None]                          # (B, N) positions with a target frame
    two = model.config.local_frames > 1
    hs, ts = h[rows], (torch.cat([tgt, later], -1) if two else tgt)[rows]    # (M, D), (M, Q or 2Q)
    if len(hs) > local_frames:
        pick = torch.randperm(len(hs), generator=torch.Generator().manual_seed(rng.randrange(2 ** 31)))[:local_frames]
        hs, ts = hs[pick], ts[pick]
    if two:       # after the last frame (EOS) there is no frame to predict: MASK as input, no loss
        inputs = ts.masked_fill(ts == -100, model.config.out_vocab)
        out["stack_local"] = ce(model.local_logits(hs, inputs, "ar"), ts)
        return out
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
