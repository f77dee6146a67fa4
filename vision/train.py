"""Train the image models on the procedural data set (CPU, a few minutes each).

    python -m vision.train tokenizer            # VQ autoencoder -> vision/weights/tokenizer/
    python -m vision.train prior                # class-conditional Llama over the codes -> weights/prior/
    python -m vision.train classifier           # the small classifier that vision.metrics scores with
    python -m vision.train lpd --minutes 25     # continue the prior: raster + LPD position queries

Each writes into a temporary folder and swaps it in only when complete.
"""
from __future__ import annotations

import os
import sys

import torch

from suite.runtime.options import cli_parser
from suite.runtime.storage import atomic_folder, write_json
from suite.runtime.training import Budget, exit_status, log, optimizer_step, previous_metrics, set_learning_rate, \
    training_device, warmup_cosine

from . import data as vdata
from .grounding.train import main as grounding_main
from .metrics import train_classifier_model
from .position_queries import train_lpd_model
from .prior import train_prior_model
from .tokenizer import VQTokenizer, build_vq

WEIGHTS = os.path.join(os.path.dirname(__file__), "weights")


# ---------------------------------------------------------------- tokenizer

def train_tokenizer(args, weights: str) -> None:
    """The VQ autoencoder -> `weights`/tokenizer."""
    torch.manual_seed(args.seed)
    device = training_device(args.device)
    images, _ = vdata.make_split("train", args.per_class)
    x_all = vdata.to_tensor(images).to(device)
    folder = os.path.join(weights, "tokenizer")
    if args.resume:
        from diffusers import VQModel
        vq = VQModel.from_pretrained(folder)
        log(f"resuming from {folder}")
    else:
        vq = build_vq(num_vq_embeddings=args.codebook)
    vq.to(device)
    opt = torch.optim.Adam(vq.parameters(), lr=args.lr)
    usage = torch.zeros(vq.config.num_vq_embeddings, device=device)
    prev_steps = int(previous_metrics(folder).get("steps", 0)) if args.resume else 0
    budget = Budget(args.minutes, args.steps)
    vq.train()
    for step in range(args.steps):
        set_learning_rate(opt, warmup_cosine(args.lr, step, budget.progress(step), warmup=50))
        x = x_all[torch.randint(len(x_all), (args.batch,), device=device)]
        h = vq.encode(x).latents
        zq, commit, (_, _, idx) = vq.quantize(h)
        rec = vq.decode(zq, force_not_quantize=True).sample
        loss = (rec - x).abs().mean() + ((rec - x) ** 2).mean() + commit.mean()
        optimizer_step(opt, loss, clip=None)
        usage += torch.bincount(idx.flatten(), minlength=len(usage)).float()
        if (step + 1) % args.restart_every == 0 and budget.progress(step) < 0.7:
            _restart_dead_codes(vq, usage, h.detach())
            usage.zero_()
        if step % 50 == 0:
            log(f"tokenizer step {step}/{args.steps} loss {loss.item():.4f} {budget.elapsed_s:.0f}s")
        if budget.over(step):
            break
    vq.eval()
    tok = VQTokenizer(vq)
    test, _ = vdata.make_split("test", 20)
    xt = vdata.to_tensor(test).to(device)
    with torch.no_grad():
        codes = tok.encode(xt)
        mse = float(((tok.decode(codes) - xt) ** 2).mean())
    used = int(torch.unique(codes).numel())
    log(f"test reconstruction mse {mse:.5f} (in [-1,1] units), codes used {used}/{tok.codebook_size}")
    with atomic_folder(folder) as tmp:
        vq.to("cpu").save_pretrained(tmp, safe_serialization=True)
        write_json(tmp / "metrics.json", {"test_mse": mse, "codes_used": used, "steps": step + 1 + prev_steps,
                                          "train_images": len(images), "seconds": budget.elapsed_s}, indent=1)


def _restart_dead_codes(vq, usage: torch.Tensor, h: torch.Tensor) -> None:
    """Move never-chosen codebook vectors onto random encoder outputs (avoids codebook collapse)."""
    dead = (usage == 0).nonzero().flatten()
    if not dead.numel():
        return
    vectors = h.permute(0, 2, 3, 1).reshape(-1, h.shape[1])
    pick = vectors[torch.randint(len(vectors), (dead.numel(),), device=h.device)]
    with torch.no_grad():
        vq.quantize.embedding.weight[dead] = pick + 0.01 * torch.randn_like(pick)
    log(f"restarted {dead.numel()} dead codes")


# ---------------------------------------------------------------- main

def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["grounding"]:        # box grounding: vision/grounding/train.py
        return grounding_main(argv[1:])
    if argv[:1] == ["video"]:            # the video prior and motion classifier: vision/video/train.py
        from .video.train import main as video_main
        return video_main(argv[1:])
    p = cli_parser("python -m vision.train", __doc__)
    p.add_argument("what", choices=["tokenizer", "prior", "classifier", "lpd"])
    p.add_argument("--steps", type=int, default=None)
    p.add_argument("--batch", type=int, default=None)
    p.add_argument("--lr", type=float, default=None)
    p.add_argument("--per-class", type=int, default=500, help="training images per class")
    p.add_argument("--codebook", type=int, default=256)
    p.add_argument("--restart-every", type=int, default=100)
    p.add_argument("--minutes", type=float, default=20.0, help="stop training after this long")
    p.add_argument("--hidden", type=int, default=128, help="prior width")
    p.add_argument("--layers", type=int, default=4, help="prior depth")
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--resume", action="store_true", help="continue from the saved weights")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--device", default="cpu", help="cpu, or cuda to train on a GPU")
    p.add_argument("--lpd-batch", type=int, default=8, help="lpd: position-query sequences per step")
    p.add_argument("--lpd-weight", type=float, default=1.0, help="lpd: weight of the query loss")
    p.add_argument("--lpd-steps", type=int, default=20, help="lpd: decoding steps the orders are drawn for")
    p.add_argument("--orders", type=int, default=500, help="lpd: locality-aware orders drawn up front")
    p.add_argument("--zipar-batch", type=int, default=0,
                   help="lpd: also train ZipAR's views (vision/zipar_views.py) on this many sequences per step")
    p.add_argument("--zipar-window", type=int, default=3, help="lpd: the ZipAR window those views are for")
    p.add_argument("--init", default=None, help="lpd: prior folder to start from (default weights/prior)")
    p.add_argument("--out", default=None, help="lpd: folder to write (default weights/prior)")
    p.add_argument("--save-every", type=float, default=5.0, help="lpd: checkpoint every this many minutes")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    os.makedirs(WEIGHTS, exist_ok=True)
    defaults = {"tokenizer": (2400, 16, 1e-3), "prior": (4000, 32, 2e-3), "classifier": (1500, 64, 2e-3),
                "lpd": (100000, 16, 1e-3)}[args.what]
    args.steps = args.steps or defaults[0]
    args.batch = args.batch or defaults[1]
    args.lr = args.lr or defaults[2]
    train = {"tokenizer": train_tokenizer, "prior": train_prior_model, "classifier": train_classifier_model,
             "lpd": train_lpd_model}[args.what]
    return exit_status(train, args, WEIGHTS)


if __name__ == "__main__":
    sys.exit(main())
