"""Train the video models on the procedural clips (vision/video/data.py).

    python -m vision.video.train prior --minutes 45      # the AR video prior -> vision/weights/video/prior/
    python -m vision.video.train prior --resume          # continue from the last checkpoint
    python -m vision.video.train motion                  # the motion classifier -> vision/weights/video/motion/

The prior starts from the shipped image prior (vision/weights/prior: frame 0 is an image of the
class from the first step) and learns the frames after it through the windowed mask of
vision/video/prior.py, on whole clips, with the null prompt for classifier-free guidance on 10 %
of them. With --copy motion (the default) the logits mix in a copy of frame t-1 at the offset the
clip's motion implies (vision/video/motioncopy.py: told for the moves, learnt for the others, a
gate read from the hidden state; trained at their own learning-rate scales). With --inputs each
slot also reads frame t-1's codes around its cell (vision/video/prevframe.py: input tables and a
copy head, zero at the start). It checkpoints every --save-every minutes (model, optimizer, step, minutes) and writes
the weights folder only when complete.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import sys
import time

import torch

from suite.runtime.storage import atomic_folder, atomic_path, cache_dir, read_json, write_json
from suite.runtime.training import cpu_budget, log, optimizer_step, set_learning_rate, training_device, warmup_cosine

from . import data as vdata
from .codes import VISION_WEIGHTS, encode_clips
from . import motioncopy, prevframe, rotary
from .prior import PRIOR_FILE, SAMPLING, VideoLayout, build_video_prior, code_logits, load_video_llama, warm_start

WEIGHTS = os.path.join(VISION_WEIGHTS, "video")


# ---------------------------------------------------------------- data

def clip_codes(tokenizer, tokenizer_folder: str, split: str, per_pair: int, frames: int):
    """Codes, class ids and motion ids of a split, cached per tokenizer file and data version."""
    st = os.stat(os.path.join(tokenizer_folder, "diffusion_pytorch_model.safetensors"))
    with open(vdata.__file__, "rb") as f:
        data_version = hashlib.sha1(f.read()).hexdigest()[:8]
    key = hashlib.sha1(f"{st.st_size}-{st.st_mtime_ns}-{split}-{per_pair}-{frames}-{data_version}".encode()).hexdigest()[:16]
    path = cache_dir("vision", f"video-codes-{key}.pt")
    if path.exists():
        return torch.load(path)
    clips, labels, motions = vdata.make_clips(split, per_pair, frames=frames)
    out = (encode_clips(tokenizer, clips), torch.from_numpy(labels), torch.from_numpy(motions))
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        torch.save(out, tmp)
    return out


def sequences(layout: VideoLayout, codes, labels, motions) -> torch.Tensor:
    """(N, P + T*H*W) token ids: [motion, class] ++ the codes, frames and cells in raster order."""
    prompt = torch.stack([motions + layout.motion_token(0), labels + layout.codebook], 1)
    return torch.cat([prompt, codes.reshape(len(codes), -1)], 1)


def sequence_loss(model, layout: VideoLayout, seqs, mask, per_frame: bool = False):
    """Mean cross-entropy (nats/code) of every code of (B, L) sequences under the window mask;
    with per_frame, the (T,) mean per frame instead."""
    b, length = seqs.shape
    pos = torch.arange(length, device=seqs.device).expand(b, -1)
    k = layout.codebook
    embeds = prevframe.embed(model, layout.inputs(seqs, pos), seqs, pos)
    hidden = model.model(inputs_embeds=embeds, position_ids=layout.position_ids(pos),
                         attention_mask=mask[None, None].expand(b, 1, -1, -1)).last_hidden_state[:, 1:-1]
    logits = code_logits(model, layout, hidden, seqs, pos[:, 1:-1], layout.motion_index(seqs[:, 0]))
    nll = torch.nn.functional.cross_entropy(logits.reshape(-1, k), seqs[:, 2:].reshape(-1), reduction="none")
    if per_frame:
        return nll.reshape(b, layout.frames, -1).mean((0, 2))
    return nll.mean()


@torch.no_grad()
def held_out_loss(model, layout, seqs, mask, batch: int = 4) -> torch.Tensor:
    """(T,) held-out nats/code per frame."""
    parts = [sequence_loss(model, layout, seqs[i:i + batch], mask, per_frame=True) * len(seqs[i:i + batch])
             for i in range(0, len(seqs), batch)]
    return torch.stack(parts).sum(0) / len(seqs)


# ---------------------------------------------------------------- prior

def _layout(args, codebook: int) -> VideoLayout:
    from ..data import CLASSES
    return VideoLayout(codebook, len(CLASSES), len(vdata.MOTIONS), args.frames, 16, 16, args.radius)


def _positions(args) -> dict | None:
    """video_prior.json's "positions": frame-aware rotary (vision/video/rotary.py), or None (1-D)."""
    return rotary.meta() if args.positions == "frame" else None


def _inputs(args) -> dict | None:
    """video_prior.json's "inputs": previous-frame codes around each cell (vision/video/prevframe.py):
    input tables, a copy head, or both; None: neither."""
    tables, copy = args.inputs in ("tables", "both"), args.inputs in ("copy", "both")
    return prevframe.meta(args.radius, tables, copy) if tables or copy else None


def _copy(args) -> dict | None:
    """video_prior.json's "copy": the motion-told copy (vision/video/motioncopy.py), or None."""
    return motioncopy.meta(vdata.MOTIONS, vdata._MOVES) if args.copy == "motion" else None


def _meta(layout: VideoLayout, positions: dict | None, inputs: dict | None = None, copy: dict | None = None) -> dict:
    from ..data import CLASSES, SIZE
    meta = {"codebook_size": layout.codebook, "classes": list(CLASSES), "motions": list(vdata.MOTIONS),
            "frames": layout.frames, "grid": [layout.height, layout.width], "radius": layout.radius,
            "image_size": SIZE, "order": "frames, then raster", "prompt": ["motion", "class"],
            "sampling": SAMPLING}
    if positions is not None:
        meta["positions"] = positions
    if inputs is not None:
        meta["inputs"] = inputs
    if copy is not None:
        meta["copy"] = copy
    return meta


def train_prior(args) -> None:
    from transformers import LlamaForCausalLM
    from ..tokenizer import VQTokenizer
    torch.manual_seed(args.seed)
    device = training_device(args.device)
    tok_folder = os.path.join(VISION_WEIGHTS, "tokenizer")
    tok = VQTokenizer.load(tok_folder)
    tok.vq.to(device)
    codes, labels, motions = clip_codes(tok, tok_folder, "train", args.per_pair, args.frames)
    log(f"{len(codes)} training clips of {args.frames} frames")
    layout = _layout(args, tok.codebook_size)
    seqs = sequences(layout, codes, labels, motions).to(device)
    mask = layout.training_mask().to(device)
    ckpt_path = os.path.join(args.checkpoint, "checkpoint.pt")
    state = torch.load(ckpt_path, weights_only=False) if args.resume and os.path.exists(ckpt_path) else None
    model = build_video_prior(layout, args.hidden, args.layers, args.heads, _positions(args), _inputs(args), _copy(args))
    if state is not None:
        model.load_state_dict(state["model"])
        log(f"resuming from {ckpt_path}: step {state['step']}, {state['minutes']:.1f} minutes")
    elif args.init:
        init = load_video_llama(args.init, read_json(os.path.join(args.init, PRIOR_FILE))).state_dict()
        missing = set(model.state_dict()) - set(init)
        if {m for m in missing if not m.startswith(("model.prev_frame.", "model.motion_copy."))}:
            raise ValueError(f"{args.init} is not a video prior of this layout: it lacks {sorted(missing)[:3]}")
        model.load_state_dict(init, strict=False)     # new previous-frame and copy weights keep their start
        log(f"starting from the video prior in {args.init}")
    elif not args.scratch:
        warm_start(model, LlamaForCausalLM.from_pretrained(os.path.join(VISION_WEIGHTS, "prior"), dtype=torch.float32),
                   layout)
        log("warm start from vision/weights/prior")
    model.to(device).train()
    if args.freeze_transformer:            # train the copy path only: no backward through the transformer
        for name, param in model.named_parameters():
            param.requires_grad_(name.startswith(("model.prev_frame.", "model.motion_copy.")))
    log(f"video prior: {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters, "
        f"{sum(p.numel() for p in model.parameters() if p.requires_grad)} trained")
    opt = torch.optim.AdamW(_param_groups(model, args), lr=args.lr, weight_decay=0.01, betas=(0.9, 0.95))
    step, before, wall0 = 0, 0.0, time.time()
    if state is not None:
        opt.load_state_dict(state["opt"])
        step, before = state["step"], state["minutes"]
        torch.manual_seed(args.seed + step)         # fresh batches, not the first run's again
    budget = cpu_budget(args.minutes - before, None, before, device.type)
    saved = budget.elapsed_s
    null = torch.tensor([layout.null_motion, layout.null_class], device=device)
    recent = []
    while not budget.spent():
        set_learning_rate(opt, warmup_cosine(args.lr, step, budget.progress(), warmup=args.warmup))
        x = seqs[torch.randint(len(seqs), (args.batch,), device=device)].clone()
        drop = torch.rand(args.batch, device=device) < args.null_fraction     # unconditional prompt for CFG
        x[drop, :2] = null
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.bf16):
            loss = sequence_loss(model, layout, x, mask)
        optimizer_step(opt, loss, clip=1.0)
        step += 1
        recent.append(loss.item())
        if step % 10 == 0:
            log(f"video prior step {step} loss {sum(recent[-10:]) / len(recent[-10:]):.4f} (mean of 10) "
                f"{before + budget.elapsed_s / 60:.1f} min ({(time.time() - wall0) / 60:.1f} wall)")
        if step % 50 == 0 and motioncopy.module(model) is not None:
            log("copy gate bias per motion " + " ".join(f"{v:.2f}" for v in motioncopy.module(model).gate_bias.tolist()))
        if budget.elapsed_s - saved > 60 * args.save_every:
            _checkpoint(ckpt_path, model, opt, step, before + budget.elapsed_s / 60)
            saved = budget.elapsed_s
    minutes = before + budget.elapsed_s / 60
    log(f"trained {step} steps, {minutes:.1f} {'CPU ' if device.type == 'cpu' else ''}minutes "
        f"({(time.time() - wall0) / 60:.1f} minutes wall in this run)")
    _checkpoint(ckpt_path, model, opt, step, minutes)
    model.eval()
    tc, tl, tm = clip_codes(tok, tok_folder, "test", args.test_per_pair, args.frames)
    per_frame = held_out_loss(model, layout, sequences(layout, tc, tl, tm).to(device), mask)
    log(f"held-out loss {per_frame.mean():.4f} nats/code; per frame " + " ".join(f"{v:.3f}" for v in per_frame))
    write_prior(model, layout, args.out,
                {"test_loss": float(per_frame.mean()), "test_loss_per_frame": [float(v) for v in per_frame],
                 "train_loss": float(loss.detach()), "steps": step, "train_minutes": minutes,
                 "minutes_kind": "cpu" if device.type == "cpu" else "wall",
                 "batch": args.batch, "lr": args.lr, "positions": args.positions, "inputs": args.inputs,
                 "tables_lr_scale": args.tables_lr_scale, "copy_lr_scale": args.copy_lr_scale, "copy": args.copy,
                 "told_lr_scale": args.told_lr_scale, "freeze_transformer": args.freeze_transformer, "train_clips": len(seqs), "test_clips": len(tc),
                 "init": args.init or ("scratch" if args.scratch else "vision/weights/prior"), "device": str(device)},
                _positions(args), _inputs(args), _copy(args))


def _param_groups(model, args) -> list[dict]:
    """The transformer at --lr; the new previous-frame tables and copy gates (zero at the start)
    and the motion-told copy's gate direction at their own scales of it, the motion copy's small
    per-motion tables (gate biases, offset logits and maps) at --told-lr-scale; no weight decay
    on any of them."""
    extra, told = prevframe.module(model), motioncopy.module(model)
    new = {"weight": args.tables_lr_scale, "gate": args.copy_lr_scale, "gate_bias": args.copy_lr_scale}
    groups = [{"params": [p for n, p in model.named_parameters()
                          if p.requires_grad and not n.startswith(("model.prev_frame.", "model.motion_copy."))]}]
    if extra is not None:
        groups += [{"params": [p], "scale": new[n], "weight_decay": 0.0} for n, p in extra.named_parameters()]
    if told is not None:
        groups += [{"params": [p], "scale": args.copy_lr_scale if n == "gate" else args.told_lr_scale,
                    "weight_decay": 0.0} for n, p in told.named_parameters()]
    return groups


def _checkpoint(path: str, model, opt, step: int, minutes: float) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with atomic_path(path) as tmp:
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step, "minutes": minutes}, tmp)
    log(f"checkpoint at step {step} ({minutes:.1f} minutes) -> {path}")


def write_prior(model, layout: VideoLayout, folder: str, metrics: dict, positions: dict | None = None,
                inputs: dict | None = None, copy: dict | None = None) -> None:
    from ..prior import save_prior
    with atomic_folder(folder) as tmp:
        save_prior(model, str(tmp))
        model.to(next(iter(model.parameters())).device)
        write_json(tmp / PRIOR_FILE, _meta(layout, positions, inputs, copy), indent=1)
        write_json(tmp / "metrics.json", metrics, indent=1)


# ---------------------------------------------------------------- main

def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m vision.video.train", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", choices=["prior", "motion"])
    p.add_argument("--minutes", type=float, default=45.0, help="training budget: CPU minutes of this process on a CPU (a shared CPU's wall clock runs "
                   "faster), wall minutes on a GPU; a resumed run counts earlier minutes")
    p.add_argument("--steps", type=int, default=None, help="motion: training steps (the prior runs on --minutes)")
    p.add_argument("--batch", type=int, default=None)
    p.add_argument("--lr", type=float, default=None, help="peak learning rate (prior: 1.5e-4, a fine-tune)")
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--per-pair", type=int, default=24, help="training clips per visible (class, motion) pair")
    p.add_argument("--test-per-pair", type=int, default=1, help="held-out clips per pair for the reported loss")
    p.add_argument("--frames", type=int, default=vdata.FRAMES)
    p.add_argument("--radius", type=int, default=1, help="prior: rows/columns of frame t-1 a cell sees around it")
    p.add_argument("--hidden", type=int, default=256, help="prior width (256 = the image prior's, for the warm start)")
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--positions", choices=["frame", "1d"], default="frame",
                   help="prior: rotary positions by (frame, slot in the frame) (vision/video/rotary.py) or plain 1-D")
    p.add_argument("--inputs", choices=["tables", "copy", "both", "none"], default="none",
                   help="prior: the previous frame's codes around each cell as input tables, a copy head, or both "
                   "(vision/video/prevframe.py)")
    p.add_argument("--copy", choices=["motion", "none"], default="motion",
                   help="prior: mix in frame t-1 copied at the offset the clip's motion implies (vision/video/motioncopy.py)")
    p.add_argument("--told-lr-scale", type=float, default=100.0,
                   help="prior: the motion copy's per-motion gate biases and offset tables' learning rate, times --lr")
    p.add_argument("--freeze-transformer", action="store_true",
                   help="prior: train only the new copy path and input tables (a third of a step's compute)")
    p.add_argument("--tables-lr-scale", type=float, default=1.0,
                   help="prior: the previous-frame input tables' learning rate, times --lr (they start at zero)")
    p.add_argument("--copy-lr-scale", type=float, default=3.0,
                   help="prior: the copy gates' learning rate (previous-frame gates, the motion copy's gate "
                   "direction), times --lr (they start at zero)")
    p.add_argument("--out", default=os.path.join(WEIGHTS, "prior"), help="prior: the weights folder to write")
    p.add_argument("--init", default=None, help="prior: start from this video prior folder (same layout) instead of "
                   "the image prior")
    p.add_argument("--scratch", action="store_true", help="prior: random init instead of the image prior's weights")
    p.add_argument("--null-fraction", type=float, default=0.1, help="prior: clips trained with the null prompt")
    p.add_argument("--resume", action="store_true", help="continue from the checkpoint in --checkpoint")
    p.add_argument("--checkpoint", default=str(cache_dir("vision", "video-prior-checkpoint")))
    p.add_argument("--save-every", type=float, default=5.0, help="checkpoint every this many minutes")
    p.add_argument("--bf16", action=argparse.BooleanOptionalAction, default=True,
                   help="prior: bf16 autocast (fp32 weights; about 1.7x faster on a CPU with AMX)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--device", default="cpu", help="cpu, or cuda to train on a GPU")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    defaults = {"prior": (2, 1.5e-4, None), "motion": (32, 2e-3, 800)}[args.what]
    args.batch = args.batch or defaults[0]
    args.lr = args.lr or defaults[1]
    args.steps = args.steps or defaults[2]
    try:
        if args.what == "prior":
            train_prior(args)
        else:
            from .metrics import train_motion_classifier
            train_motion_classifier(args, os.path.join(WEIGHTS, "motion"))
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
