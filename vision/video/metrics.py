"""Quality of generated clips.

- per-frame class accuracy: the image classifier of vision/metrics.py on every frame;
- motion accuracy: a small CNN over the stacked frames of a clip, trained on real (procedural)
  clips (`python -m vision.video.train motion`, weights in vision/weights/video/motion/);
- Frechet distance on ImageNet MobileNetV2 features of the frames (vision/metrics.py), generated
  vs held-out real frames.
"""
from __future__ import annotations

import os

import numpy as np
import torch

from suite.runtime.storage import atomic_folder, read_json, write_json
from suite.runtime.training import Budget, log, optimizer_step, set_learning_rate, warmup_cosine

from ..data import to_tensor
from ..metrics import augment
from . import data as vdata

MOTION_FILE = "motion_classifier.safetensors"


class MotionClassifier(torch.nn.Module):
    """(B, T, 3, 64, 64) in [-1, 1] -> (B, M) logits: the T frames stacked as channels."""

    def __init__(self, frames: int = vdata.FRAMES, num_motions: int = len(vdata.MOTIONS), width: int = 32):
        super().__init__()
        self.frames = frames           # clips of this many frames only (they are stacked as channels)
        layers, c = [], 3 * frames
        for out in (width, width * 2, width * 3, width * 3):
            layers += [torch.nn.Conv2d(c, out, 3, padding=1), torch.nn.BatchNorm2d(out), torch.nn.ReLU(),
                       torch.nn.MaxPool2d(2)]
            c = out
        self.features = torch.nn.Sequential(*layers)
        self.head = torch.nn.Linear(c, num_motions)

    def forward(self, x):
        return self.head(self.features(x.flatten(1, 2)).mean((2, 3)))


def clips_tensor(clips) -> torch.Tensor:
    """(N, T, S, S, 3) uint8 clips (or a list of clips: lists of PIL frames or arrays) -> (N, T, 3, S, S) in [-1, 1]."""
    from ..metrics import as_uint8_array
    if not isinstance(clips, np.ndarray):
        clips = np.stack([as_uint8_array(clip) for clip in clips])
    n, t = clips.shape[:2]
    return to_tensor(clips.reshape(n * t, *clips.shape[2:])).reshape(n, t, 3, *clips.shape[2:4])


def augment_clips(x: torch.Tensor) -> torch.Tensor:
    """`vision.metrics.augment` with one draw per clip (the frames tiled side by side)."""
    n, t, c, h, w = x.shape
    tiled = augment(x.permute(0, 2, 3, 1, 4).reshape(n, c, h, t * w))
    return tiled.reshape(n, c, h, t, w).permute(0, 3, 1, 2, 4)


@torch.no_grad()
def predict_motion(model: MotionClassifier, clips) -> np.ndarray:
    x = clips_tensor(clips)
    return np.concatenate([model(x[i:i + 64]).argmax(-1).numpy() for i in range(0, len(x), 64)])


def load_motion_classifier(folder: str) -> MotionClassifier:
    from safetensors.torch import load_file
    path = os.path.join(folder, MOTION_FILE)
    if not os.path.isfile(path):
        raise ValueError(f"no motion classifier in {folder}; train it with `python -m vision.video.train motion`")
    cfg = read_json(os.path.join(folder, "config.json"))
    model = MotionClassifier(cfg["frames"], len(cfg["motions"]), cfg["width"])
    model.load_state_dict(load_file(path))
    return model.eval()


def train_motion_classifier(args, folder: str) -> None:
    """Train on real clips of the train split; report held-out accuracy on real clips and on
    their VQ round trips (what generated clips look like)."""
    from safetensors.torch import save_file
    torch.manual_seed(args.seed)
    clips, _, motions = vdata.make_clips("train", args.per_pair, frames=args.frames)
    x_all, y_all = clips_tensor(clips), torch.from_numpy(motions)
    model = MotionClassifier(args.frames)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=1e-4)
    budget = Budget(args.minutes, args.steps)
    model.train()
    for step in range(args.steps):
        set_learning_rate(opt, warmup_cosine(args.lr, step, budget.progress(step), warmup=50))
        idx = torch.randint(len(x_all), (args.batch,))
        loss = torch.nn.functional.cross_entropy(model(augment_clips(x_all[idx])), y_all[idx])
        optimizer_step(opt, loss, clip=None)
        if step % 50 == 0:
            log(f"motion classifier step {step}/{args.steps} loss {loss.item():.4f} {budget.elapsed_s:.0f}s")
        if budget.over(step):
            break
    model.eval()
    test, test_labels, test_motions = vdata.make_clips("test", args.test_per_pair, frames=args.frames)
    acc = float((predict_motion(model, test) == test_motions).mean())
    vq_acc = float((predict_motion(model, vq_round_trip(test)) == test_motions).mean())
    log(f"held-out motion accuracy {acc:.3f} (VQ round trips {vq_acc:.3f}) on {len(test)} clips")
    with atomic_folder(folder) as tmp:
        save_file(model.state_dict(), str(tmp / MOTION_FILE))
        write_json(tmp / "config.json", {"frames": args.frames, "motions": list(vdata.MOTIONS), "width": 32}, indent=1)
        write_json(tmp / "metrics.json", {"test_accuracy": acc, "test_accuracy_vq": vq_acc, "test_clips": len(test),
                                          "steps": step + 1, "seconds": budget.elapsed_s}, indent=1)


def vq_round_trip(clips: np.ndarray, tokenizer=None) -> np.ndarray:
    """(N, T, S, S, 3) uint8 clips through the shipped VQ tokenizer and back."""
    from ..data import to_uint8
    from ..tokenizer import VQTokenizer
    from .codes import VISION_WEIGHTS, encode_clips
    tok = tokenizer or VQTokenizer.load(os.path.join(VISION_WEIGHTS, "tokenizer"))
    codes = encode_clips(tok, clips)
    n, t = codes.shape[:2]
    frames = [to_uint8(tok.decode(codes.reshape(n * t, *codes.shape[2:])[i:i + 128]))
              for i in range(0, n * t, 128)]
    return np.concatenate(frames).reshape(clips.shape)
