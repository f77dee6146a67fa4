"""Train the OCR model: `python -m document.train [--minutes 40] [--out document/weights/ocr-small]`.

One forward per batch scores two streams of the same text (block_train_mask): the clean stream
gives the causal (AR) loss, the noisy stream the block-diffusion loss (blocks of B tokens with a
random phase, a random fraction of each block masked, bidirectional inside a block, causal
across blocks; the noisy slot after the anchor is always masked, as at decode time). Lines are
rendered on the fly (document.data); the held-out texts are never trained on. An auxiliary CTC
loss on the encoder columns (weight 0.5) makes the encoder learn to read sooner; decoding never
uses it.
"""
from __future__ import annotations

import argparse
import copy
import random
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from suite.runtime.storage import atomic_path, cache_dir
from suite.runtime.training import Budget, ClockBar, cpu_budget, log, optimizer_step, set_learning_rate, warmup_cosine

from . import data, typeset
from .model import EOS, MASK, PAD, OCRModel, block_anchor, block_train_mask, default_config

DEFAULT_OUT = Path(__file__).parent / "weights" / "ocr-small"
DEFAULT_STATE = cache_dir("document-train-state.pt")
BLOCK_SIZES = (2, 4, 8, 16)
TYPESET_SHARE = 0.6      # --data typeset: this share of each batch from document.typeset, the rest as classic
CTC_WEIGHT = 0.5


def encode_batch(model: OCRModel, texts: list[str]) -> torch.Tensor:
    """(B, L) token ids [BOS, chars, EOS, PAD...], L = the longest row (at most model.max_length)."""
    rows = [model.tokenizer.encode(t)[:model.max_length] for t in texts]
    ids = torch.full((len(texts), max(len(r) for r in rows)), PAD, dtype=torch.long)    # trimmed to the longest row
    for b, row in enumerate(rows):
        ids[b, :len(row)] = torch.tensor(row)
    return ids


def pixels_of(images) -> torch.Tensor:
    return torch.from_numpy(np.stack([data.to_model_input(im) for im in images]))[:, None]   # (B, 1, H, W)


def diffusion_batch(ids: torch.Tensor, rng: random.Random):
    """ids (B, L) -> inputs (B, 2n), positions (B, 2n), masks (B, 1, 2n, 2n), targets (B, 2n) with
    -100 where no loss is taken; n = L - 1 (slot p predicts token p + 1)."""
    batch, n = ids.shape[0], ids.shape[1] - 1
    inputs, masks, targets = [], [], []
    nxt = ids[:, 1:]
    for b in range(batch):
        bs = rng.choice(BLOCK_SIZES)
        off = rng.randrange(bs)
        a = block_anchor(n, bs, off)
        p = torch.arange(n)
        inner = p > a
        ratio = torch.rand(n)[a]                                   # one masking rate per block
        masked = inner & ((torch.rand(n) < ratio) | (p == a + 1))
        noisy = torch.where(masked, torch.full_like(p, MASK), ids[b, :n])
        # a noisy slot's target counts when the model cannot see it: masked, or the next block's anchor
        unseen = torch.cat([masked[1:], torch.ones(1, dtype=torch.bool)]) | (torch.cat([a[1:], a[-1:] + bs]) != a)
        t_noisy = torch.where(inner & unseen & (nxt[b] != PAD), nxt[b], torch.full_like(p, -100))
        t_clean = torch.where(nxt[b] != PAD, nxt[b], torch.full_like(p, -100))
        t_clean[(ids[b, :n] == EOS) | (ids[b, :n] == PAD)] = -100
        inputs.append(torch.cat([ids[b, :n], noisy]))
        masks.append(block_train_mask(n, bs, off))
        targets.append(torch.cat([t_clean, t_noisy]))
    positions = torch.arange(n).repeat(2).expand(batch, -1)
    return torch.stack(inputs), positions, torch.stack(masks)[:, None], torch.stack(targets), n


def losses(model: OCRModel, pixels: torch.Tensor, ids: torch.Tensor, rng: random.Random):
    """(causal, block-diffusion, auxiliary CTC) losses of one batch (on the device of `ids`)."""
    *streams, n = diffusion_batch(ids.cpu(), rng)
    inputs, positions, masks, targets = (t.to(ids.device) for t in streams)
    enc = model.encoder(pixels)                                                       # (B, S, D)
    logits = model.decoder_logits(inputs, positions, masks, enc)                      # (B, 2n, V)
    v = logits.shape[-1]
    causal = F.cross_entropy(logits[:, :n].reshape(-1, v), targets[:, :n].reshape(-1), ignore_index=-100)
    block = F.cross_entropy(logits[:, n:].reshape(-1, v), targets[:, n:].reshape(-1), ignore_index=-100)
    chars = ids[:, 1:]
    lengths = ((chars != EOS) & (chars != PAD)).sum(1)
    log_probs = model.ctc_logits(enc).log_softmax(-1).transpose(0, 1)                 # (cols, B, V)
    ctc = F.ctc_loss(log_probs, chars, torch.full((ids.shape[0],), log_probs.shape[0], dtype=torch.long,
                                                  device=ids.device), lengths, blank=PAD, zero_infinity=True)
    return causal, block, ctc


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="example: python -m document.train --minutes 40 --threads 1")
    ap.add_argument("--minutes", type=float, default=40.0, help="training time budget (wall minutes; CPU minutes with --cpu)")
    ap.add_argument("--cpu", action="store_true",
                    help="count --minutes as this process's CPU time (a shared CPU's wall clock runs ahead of the compute)")
    ap.add_argument("--wall-minutes", type=float, default=None,
                    help="with --cpu: also stop after this many wall minutes (the cosine follows whichever runs out first)")
    ap.add_argument("--typeset-share", type=float, default=TYPESET_SHARE,
                    help="--data typeset: the share of each batch drawn from document.typeset (the rest: classic lines)")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu", help="where the model trains: cpu (default) or cuda (the GPU recipe "
                                                     "in the weights' README)")
    ap.add_argument("--workers", type=int, default=0,
                    help="render the batches in this many worker processes, ahead of the steps (0: between them, "
                         "in this process; a GPU trains faster than one core renders)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(DEFAULT_OUT))
    ap.add_argument("--resume", default=None, metavar="FOLDER",
                    help="start from the weights in FOLDER (and its optimizer state in --state, if saved)")
    ap.add_argument("--data", choices=("typeset", "classic"), default="classic",
                    help="typeset: document.typeset lines (60%%, extended charset) mixed with document.data's; "
                         "classic: document.data's lines alone, ASCII charset (the ocr-small recipe)")
    ap.add_argument("--warmup", type=int, default=200, help="linear warm-up steps")
    ap.add_argument("--state", default=str(DEFAULT_STATE),
                    help="optimizer state file, written with each checkpoint (kept out of the weights folder)")
    ap.add_argument("--continue-run", action="store_true",
                    help="with --resume OUT and its --state: continue an interrupted run (its cosine goes on from "
                         "where it stopped, no warm-up again); --minutes is then the time still to run")
    ap.add_argument("--encoder-layers", type=int, nargs=4, default=None, metavar="N",
                    help="residual blocks per encoder stage (default 1 1 1 1); with --resume, the resumed model is "
                         "grown to this depth, its new blocks starting as identities")
    ap.add_argument("--decoder-layers", type=int, default=None, metavar="N",
                    help="decoder layers (default 3); with --resume, grown the same way")
    args = ap.parse_args(argv)
    if args.minutes <= 0 or args.batch < 1:
        print("error: --minutes and --batch must be positive", file=sys.stderr)
        return 2
    if not 0.0 <= args.typeset_share <= 1.0:
        print("error: --typeset-share must be between 0 and 1", file=sys.stderr)
        return 2
    if args.workers < 0:
        print("error: --workers must be 0 or more", file=sys.stderr)
        return 2
    try:
        device = torch.device(args.device)
        torch.empty(0, device=device)
    except (RuntimeError, AssertionError) as e:
        print(f"error: --device {args.device} is not usable here ({str(e).splitlines()[0]}); pass --device cpu",
              file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    if args.resume:
        model = OCRModel.load(args.resume).train()
        start_step = int(model.cfg.get("train_steps", 0))
        if args.data == "typeset" and model.cfg["charset"] != typeset.CHARSET:
            model = grow_charset(model, typeset.CHARSET).train()
            log(f"charset grown to {len(typeset.CHARSET)} characters (new rows start untrained)")
        if args.encoder_layers or args.decoder_layers:
            model = grow_depth(model, args.encoder_layers, args.decoder_layers).train()
            log(f"grown to encoder {model.cfg['encoder']['layers']}, decoder {model.cfg['decoder']['n_layer']} layers")
    else:
        charset = typeset.CHARSET if args.data == "typeset" else data.CHARSET
        cfg = default_config(charset, data.MAX_CHARS, data.HEIGHT, data.WIDTH)
        cfg["encoder"]["layers"] = args.encoder_layers or cfg["encoder"]["layers"]
        cfg["decoder"]["n_layer"] = args.decoder_layers or cfg["decoder"]["n_layer"]
        model = OCRModel(cfg)
        start_step = 0
    model.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    run_before, step = 0.0, 0          # minutes and steps of the interrupted run this one continues
    if args.resume and Path(args.state).is_file():
        saved = torch.load(args.state, weights_only=True)
        if saved.get("train_steps") == start_step:
            opt.load_state_dict(saved["optimizer"])
            log(f"resumed optimizer state from {args.state}")
            if args.continue_run:
                run_before, step = schedule_before(saved, args.minutes), int(saved.get("run_steps", 0))
                log(f"continuing the run after {step} steps and {run_before:.1f} min of its schedule")
    if args.continue_run and not run_before:
        print(f"error: --continue-run needs --resume FOLDER and the --state file its run wrote "
              f"(train_steps {start_step} not found in {args.state})", file=sys.stderr)
        return 2
    log(f"training from step {start_step} for {args.minutes} min")
    val = data.make_samples(64, seed=999, split="heldout")
    val_px, val_ids = pixels_of([s.image for s in val]).to(device), encode_batch(model, [s.text for s in val]).to(device)
    batches = rendered(model, args, rng)
    budget = cpu_budget(args.minutes, minutes_before=run_before) if args.cpu else Budget(args.minutes, minutes_before=run_before)
    first_step = step
    wall = Budget(args.wall_minutes) if args.cpu and args.wall_minutes else None
    progress = (lambda: max(budget.progress(), wall.progress())) if wall else budget.progress
    minutes_done = float(model.cfg.get("train_minutes", 0)) if args.resume else 0.0
    bar, status = ClockBar(args.minutes * 60, "train"), ""
    while progress() < 1.0:
        lr = set_learning_rate(opt, warmup_cosine(args.lr, step, progress(), args.warmup))
        pixels, ids = next(batches)
        model.train()
        causal, block, ctc = losses(model, pixels.to(device), ids.to(device), rng)
        optimizer_step(opt, causal + block + CTC_WEIGHT * ctc)
        step += 1
        if step % 50 == 0:
            model.eval()
            with torch.no_grad():
                vc, vb, _ = losses(model, val_px, val_ids, random.Random(0))
            status = (f"step {step} causal {causal.item():.3f} block {block.item():.3f} "
                      f"val_causal {vc.item():.3f} val_block {vb.item():.3f}")
            log(f"step {start_step + step - first_step} t={budget.elapsed_s:.0f}s lr={lr:.2e} ctc={ctc.item():.4f} causal={causal.item():.4f} "
                f"block={block.item():.4f} val_causal={vc.item():.4f} val_block={vb.item():.4f}")
        if step % 500 == 0:
            checkpoint(model, opt, args, start_step + step - first_step, minutes_done + budget.elapsed_s / 60,
                       (step, run_before + budget.elapsed_s / 60, progress()))
        bar.show(budget.elapsed_s, status)
    bar.close()
    model.eval()
    checkpoint(model, opt, args, start_step + step - first_step, minutes_done + budget.elapsed_s / 60,
               (step, run_before + budget.elapsed_s / 60, min(progress(), 1.0)))
    print(f"saved {args.out} after {start_step + step - first_step} steps ({step - first_step} in this process)")
    return 0


def grow_charset(model: OCRModel, charset: str) -> OCRModel:
    """The model with its charset extended to `charset`, which must start with the old one (old
    characters keep their ids and rows; the new characters' embedding and output rows are fresh)."""
    old = model.cfg["charset"]
    if not charset.startswith(old):
        raise ValueError("the new charset must extend the old one (old characters first, in order); "
                         "train from scratch (no --resume) to change it otherwise")
    grown = OCRModel({**model.cfg, "charset": charset})
    state = grown.state_dict()
    for name, value in model.state_dict().items():
        if state[name].shape == value.shape:
            state[name] = value
        else:                                   # the vocabulary axis (embeddings, output and CTC heads)
            state[name] = state[name].clone()
            state[name][:value.shape[0]] = value
    grown.load_state_dict(state)
    return grown


def grow_depth(model: OCRModel, encoder_layers: list[int] | None, decoder_layers: int | None) -> OCRModel:
    """The model deepened to `encoder_layers` blocks per stage and `decoder_layers` layers, computing
    the same function: old blocks keep their weights (the first of each stage, the first decoder
    layers); each new block's last scale or output projection starts at zero, so it adds nothing
    to its residual stream until trained (a new ResNet block's input is already past a ReLU)."""
    old_enc, old_dec = model.cfg["encoder"]["layers"], model.cfg["decoder"]["n_layer"]
    enc, dec = list(encoder_layers or old_enc), decoder_layers or old_dec
    if any(n < o for n, o in zip(enc, old_enc)) or dec < old_dec:
        raise ValueError(f"a model grows only: encoder {old_enc} -> {enc}, decoder {old_dec} -> {dec}")
    grown = OCRModel({**model.cfg, "encoder": {**model.cfg["encoder"], "layers": enc},
                      "decoder": {**model.cfg["decoder"], "n_layer": dec}})
    state = grown.state_dict()
    state.update(model.state_dict())
    for stage, (new, old) in enumerate(zip(enc, old_enc), start=1):
        for block in range(old, new):
            nn.init.zeros_(state[f"encoder.cnn.layer{stage}.{block}.bn2.weight"])
    for layer in range(old_dec, dec):
        for proj in ("attn", "crossattention", "mlp"):
            for part in ("weight", "bias"):
                nn.init.zeros_(state[f"decoder.transformer.h.{layer}.{proj}.c_proj.{part}"])
    grown.load_state_dict(state)
    return grown


class RenderedBatches(torch.utils.data.IterableDataset):
    """Endless training batches (pixels, ids), each DataLoader worker drawing lines from a seed of its own."""

    def __init__(self, model: OCRModel, args):
        self.tokenizer, self.max_length, self.args = model.tokenizer, model.max_length, args

    def __iter__(self):
        worker = torch.utils.data.get_worker_info()
        rng = random.Random(f"{self.args.seed} {worker.id if worker else 0}")
        while True:
            yield rendered_batch(self, self.args, rng)


def rendered_batch(model, args, rng: random.Random) -> tuple[torch.Tensor, torch.Tensor]:
    """One training batch rendered: (B, 1, H, W) pixels and (B, L) token ids (`model`: anything with the
    model's tokenizer and max_length)."""
    batch = training_batch(args.batch, args.data, rng, args.typeset_share)
    return pixels_of([s.image for s in batch]), encode_batch(model, [s.text for s in batch])


def rendered(model: OCRModel, args, rng: random.Random):
    """The run's batches: rendered here between steps, or with --workers ahead of them in worker processes."""
    if not args.workers:
        while True:
            yield rendered_batch(model, args, rng)
    yield from torch.utils.data.DataLoader(RenderedBatches(model, args), batch_size=None, num_workers=args.workers,
                                           prefetch_factor=4, persistent_workers=True)


def training_batch(n: int, kind: str, rng: random.Random, share: float = TYPESET_SHARE) -> list[data.LineSample]:
    """n rendered training lines: classic (document.data) or typeset (`share` of them, on average)
    mixed with classic."""
    n_typeset = sum(rng.random() < share for _ in range(n)) if kind == "typeset" else 0
    batch = data.make_samples(n - n_typeset, seed=rng.randrange(2 ** 31), fonts=data.training_font_paths())
    return batch + typeset.make_samples(n_typeset, seed=rng.randrange(2 ** 31))


def schedule_before(saved: dict, minutes: float) -> float:
    """The minutes an interrupted run's schedule counts as done, so that its cosine continues where
    it stopped and ends after `minutes` more: from its saved progress p (whichever budget, CPU or
    wall, drove it), p / (1 - p) x minutes; from its saved minutes for a state without progress."""
    p = saved.get("run_progress")
    if p is None:
        return float(saved.get("run_minutes", 0.0))
    return float(p) / max(1.0 - float(p), 1e-6) * minutes


def checkpoint(model: OCRModel, opt, args, steps: int, minutes: float, run: tuple[int, float, float]) -> None:
    """Weights (+ training counters in config.json) to --out, optimizer state to --state with the
    run's (steps, schedule minutes, schedule progress) so far, which --continue-run resumes from."""
    on_cpu = model if next(model.parameters()).device.type == "cpu" else copy.deepcopy(model).cpu()
    on_cpu.save(args.out, {"train_steps": steps, "train_minutes": round(minutes, 1), "batch": args.batch,
                          "train_cpu_minutes_last_run": round(time.process_time() / 60, 1)})
    state = Path(args.state)
    state.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(state) as tmp:
        torch.save({"train_steps": steps, "optimizer": opt.state_dict(), "run_steps": run[0], "run_minutes": run[1],
                    "run_progress": run[2]}, tmp)


if __name__ == "__main__":
    sys.exit(main())
