"""Train the grounding model: `python -m vision.train grounding [--minutes 32] [--resume]`.

1. Render the training scenes (vision.grounding.data, train split; `--workers` processes) and run
   the frozen MobileNetV2 over each once (on `--device`); the features are cached on disk
   (~/.cache/parasuite/grounding/, or $PARASUITE_CACHE/grounding/), so a resumed run skips this.
2. Each step draws fresh referring expressions over random cached scenes and scores, in one
   forward, two streams of each answer (`train_mask`): the clean causal stream (AR loss, next slot)
   and the block stream (every box block's later slots masked, bidirectional inside the block,
   causal across blocks: the parallel-box loss). Coordinate targets are softened with a Gaussian
   over neighbouring grid values (half the mass; the argmax stays the true value).
3. Checkpoints every 200 steps (atomic); the held-out split is never trained on.

On a GPU (`--device cuda`, recipe in vision/grounding/train_gpu.sh) the batches are drawn by
`--workers` processes beside the training loop; the saved weights are CPU tensors either way.
"""
from __future__ import annotations

import multiprocessing
import random
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from suite.runtime.options import cli_parser
from suite.runtime.storage import atomic_path, cache_dir, write_bytes
from suite.runtime.training import Budget, exit_status, log, optimizer_step, set_learning_rate, training_device, warmup_cosine

from . import data
from .model import (COORD0, GRID, GRID_CELLS, IMAGE_SIZE, MASK, PAD, SEP, TASKS, GroundingModel, QueryTokenizer,
                    answer_tokens, default_config, feature_encoder, prompt_tokens)

DEFAULT_OUT = Path(__file__).resolve().parents[1] / "weights" / "grounding"
CACHE = cache_dir("grounding")
SIGMA = 5.0          # Gaussian target width, grid units
SOFT = 0.5           # share of the coordinate target spread over neighbours


def tokenizer_source() -> Path:
    """SmolLM2's tokenizer.json: from the shipped weights, else the converted SmolLM2 cache."""
    shipped = DEFAULT_OUT / "tokenizer.json"
    if shipped.is_file():
        return shipped
    cache = cache_dir("smollm2-135m-instruct", "tokenizer.json")
    if cache.is_file():
        return cache
    raise RuntimeError("SmolLM2's tokenizer is needed: run `python -m text --help` once (it converts the "
                       "embedded SmolLM2 into ~/.cache/parasuite) or keep vision/weights/grounding/tokenizer.json")


def encode_scenes(scenes, batch: int = 64, progress: bool = True, device: str = "cpu") -> torch.Tensor:
    """(N, S, FEATURE_DIM) float16 frozen features (on the CPU), computed on `device`."""
    from tqdm import tqdm
    enc = feature_encoder().to(device)
    out = []
    for lo in tqdm(range(0, len(scenes), batch), desc="features", disable=not progress, file=sys.stderr):
        imgs = torch.from_numpy(np.stack([s.image for s in scenes[lo:lo + batch]]))
        out.append(enc(imgs.to(device)).half().cpu())
    return torch.cat(out)


def render(split: str, task: str, indices, workers: int = 0) -> list:
    """data.scene(split, i, task) for each index, in `workers` processes when workers > 1."""
    if workers <= 1:
        return [data.scene(split, i, task) for i in indices]
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        return pool.starmap(data.scene, [(split, i, task) for i in indices], chunksize=50)


CHUNK = 1000         # scenes per cached feature file


def _chunk_path(split: str, task: str, k: int) -> Path:
    return CACHE / f"features-v2-{split}-{task}-chunk{k:03d}-{CHUNK}.pt"


def cache_chunk(split: str, task: str, k: int, progress: bool = True, device: str = "cpu", workers: int = 0,
                scenes=()) -> torch.Tensor:
    """Features of scenes k*CHUNK .. (k+1)*CHUNK-1 of a split, cached on disk (atomic write).
    `scenes`: the chunk's first scenes where the caller has rendered them already."""
    path = _chunk_path(split, task, k)
    if path.is_file():
        return torch.load(path)
    scenes = list(scenes) + render(split, task, range(k * CHUNK + len(scenes), (k + 1) * CHUNK), workers)
    feats = encode_scenes(scenes, batch=64 if str(device) == "cpu" else 1000, progress=progress, device=device)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        torch.save(feats, tmp)
    return feats


def cached_split(split: str, task: str, n: int, device: str = "cpu", workers: int = 0):
    """(scenes, features on `device`) for scenes 0..n-1 of a split, features cached on disk in
    chunks of CHUNK scenes (so runs of different sizes share them, and `--cache-only` jobs can fill
    them in parallel)."""
    scenes = render(split, task, range(n), workers)
    feats = torch.cat([cache_chunk(split, task, k, device=device, workers=workers,
                                   scenes=scenes[k * CHUNK:(k + 1) * CHUNK]) for k in range(-(-n // CHUNK))])[:n]
    return scenes, feats.to(device)


def train_mask(n_clean: int, blocks: list[int], block: int, n: int) -> torch.Tensor:
    """(n, n) bool attention for [clean slots ++ noisy slots ++ padding].

    Clean slots are causal. For each box block starting at clean index st, B-1 noisy slots (MASK)
    see the clean slots < st and each other (bidirectional); padding sees itself only."""
    m = torch.zeros(n, n, dtype=torch.bool)
    m[:n_clean, :n_clean] = torch.ones(n_clean, n_clean, dtype=torch.bool).tril()
    k = n_clean
    for st in blocks:
        m[k:k + block - 1, :st] = True
        m[k:k + block - 1, k:k + block - 1] = True
        k += block - 1
    idx = torch.arange(k, n)
    m[idx, idx] = True
    return m


def cell_targets(examples) -> torch.Tensor:
    """(B, S) 1.0 on the feature cells that a query's targets cover (the cell centre inside a target's
    box, and the cell under each box's centre), 0.0 elsewhere ("no match": all 0)."""
    side = GRID_CELLS
    centre = (torch.arange(side) + 0.5) * IMAGE_SIZE / side
    out = torch.zeros(len(examples), side, side)
    for b, (_, _, targets) in enumerate(examples):
        for obj in targets:
            x0, y0, x1, y1 = obj.box
            inside_y, inside_x = (centre >= y0) & (centre <= y1), (centre >= x0) & (centre <= x1)
            out[b] += (inside_y[:, None] & inside_x[None]).float()
            cx, cy = obj.centre
            out[b, min(int(cy * side / IMAGE_SIZE), side - 1), min(int(cx * side / IMAGE_SIZE), side - 1)] = 1.0
    return out.clamp(max=1.0).flatten(1)


def make_batch(examples, tok: QueryTokenizer):
    """examples: [(task, query text, targets)] -> inputs, positions, masks (B,1,N,N), targets (B,N),
    noisy (B,N) and the cells the targets cover (B, S) (`cell_targets`)."""
    rows = []
    for task, text, targets in examples:
        block = TASKS[task][1]
        prompt, answer = prompt_tokens(tok, text, task), answer_tokens(targets, task)
        clean = prompt + answer
        P = len(prompt)
        starts = [P + k * block for k in range(len(targets))]
        noisy_in, noisy_pos, noisy_tgt = [], [], []
        for st in starts:
            for j in range(1, block):
                noisy_in.append(MASK)
                noisy_pos.append(st - 1 + j)
                noisy_tgt.append(clean[st + j])
        tgt_clean = [-100] * (P - 1) + answer + [-100]
        rows.append((clean, list(range(len(clean))), tgt_clean, noisy_in, noisy_pos, noisy_tgt, starts, block))
    n = max(len(r[0]) + len(r[3]) for r in rows)
    B = len(rows)
    inputs = torch.full((B, n), PAD, dtype=torch.long)
    positions = torch.zeros(B, n, dtype=torch.long)
    targets = torch.full((B, n), -100, dtype=torch.long)
    noisy = torch.zeros(B, n, dtype=torch.bool)
    masks = torch.zeros(B, 1, n, n, dtype=torch.bool)
    for b, (clean, pos, tc, ni, npos, nt, starts, block) in enumerate(rows):
        c = len(clean)
        inputs[b, :c + len(ni)] = torch.tensor(clean + ni)
        positions[b, :c + len(ni)] = torch.tensor(pos + npos)
        targets[b, :c + len(nt)] = torch.tensor(tc + nt)
        noisy[b, c:c + len(ni)] = True
        masks[b, 0] = train_mask(c, starts, block, n)
    return inputs, positions, masks, targets, noisy, cell_targets(examples)


def soft_ce(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over slots with a target; coordinate targets spread SOFT of their mass
    over a Gaussian of neighbouring grid values. logits (K, V), targets (K,)."""
    logp = logits.float().log_softmax(-1)
    hard = -logp.gather(1, targets[:, None]).squeeze(1)                     # (K,)
    is_coord = (targets >= COORD0) & (targets <= COORD0 + GRID)
    if not is_coord.any():
        return hard.mean()
    grid = torch.arange(GRID + 1, device=logits.device).float()
    v = (targets[is_coord] - COORD0).float()[:, None]
    g = torch.exp(-0.5 * ((grid[None] - v) / SIGMA) ** 2)
    g = g / g.sum(1, keepdim=True)                                          # (Kc, G+1)
    spread = -(g * logp[is_coord, COORD0:COORD0 + GRID + 1]).sum(1)
    loss = hard.clone()
    loss[is_coord] = (1 - SOFT) * hard[is_coord] + SOFT * spread
    return loss.mean()


def losses(model: GroundingModel, feats: torch.Tensor, batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(causal, block, cell) losses of one batch; feats (B, S, FEATURE_DIM). cell: binary CE of the
    model's cell map against the cells its targets cover (0 for a model without a cell_head)."""
    inputs, positions, masks, targets, noisy, cells = batch
    enc = model.encode(feats)
    logits, states = model.decoder_logits(inputs, positions, masks, enc, hidden=True)   # (B, N, V), (B, N, D)
    has = targets != -100
    causal = soft_ce(logits[has & ~noisy], targets[has & ~noisy])
    block = soft_ce(logits[has & noisy], targets[has & noisy])
    if model.cell_head is None:
        return causal, block, torch.zeros((), device=feats.device)
    sep = states[torch.arange(len(inputs)), (inputs == SEP).int().argmax(1)]                # (B, D)
    cell = F.binary_cross_entropy_with_logits(model.cell_logits(sep, enc), cells)
    return causal, block, cell


def sample_examples(pools, n: int, rng: random.Random, obb_share: float, hard_share: float = 0.0):
    """n (task, features index, query) draws from the cached scenes of each task. A share
    `hard_share` of the draws is redrawn (up to 10 times, fresh scene and query) until the answer
    is not exactly one box: several matches or "no match", the cases the model gets wrong most
    (validation: 47 % of 2-target and 0 % of 3-target queries right against 91 % of 1-target)."""
    out = []
    for _ in range(n):
        task = "obb" if rng.random() < obb_share else "aabb"
        scenes, feats = pools[task]
        hard = rng.random() < hard_share
        for _try in range(10 if hard else 1):
            i = rng.randrange(len(scenes))
            q = data.make_query(scenes[i], np.random.default_rng(rng.randrange(2 ** 31)))
            if len(q.targets) != 1:
                break
        out.append((task, i, q))
    return out


def gather(pools, draws, tok, batch=None):
    """(features, batch on the features' device) of the draws; `batch`: their make_batch, if made."""
    feats = torch.stack([pools[t][1][i] for t, i, _ in draws])
    if batch is None:
        batch = make_batch([(t, q.text, q.targets) for t, _, q in draws], tok)
    return feats, tuple(x.to(feats.device) for x in batch)


class Draws(torch.utils.data.IterableDataset):
    """Endless (draws, make_batch) pairs from `--workers` DataLoader processes, each with its own
    seeded stream; the features are gathered in the training process."""

    def __init__(self, pools, tok, args):
        self.pools = {t: (scenes, None) for t, (scenes, _) in pools.items()}
        self.tok, self.args = tok, args

    def __iter__(self):
        a = self.args
        rng = random.Random(a.seed * 1000 + 1 + torch.utils.data.get_worker_info().id)
        while True:
            draws = sample_examples(self.pools, a.batch, rng, a.obb_share, a.hard_share)
            yield draws, make_batch([(t, q.text, q.targets) for t, _, q in draws], self.tok)


def main(argv=None) -> int:
    ap = cli_parser("python -m vision.train grounding", __doc__, "python -m vision.train grounding --minutes 32 --threads 1")
    ap.add_argument("--minutes", type=float, default=32.0, help="training-loop time budget (features not included)")
    ap.add_argument("--scenes", type=int, default=3000, help="training scenes (axis-aligned task)")
    ap.add_argument("--obb-scenes", type=int, default=1000, help="training scenes (oriented task)")
    ap.add_argument("--obb-share", type=float, default=0.3, help="share of oriented examples per batch")
    ap.add_argument("--hard-share", type=float, default=0.0,
                    help="share of draws redrawn towards several matches or no match (see sample_examples)")
    ap.add_argument("--cell-aux", type=float, default=0.0,
                    help="weight of an auxiliary map of the cells the query's targets cover, scored from the "
                         "decoder's <sep> state (a new model gets the cell head; 0: none)")
    ap.add_argument("--batch", type=int, default=48)
    ap.add_argument("--lr", type=float, default=1.5e-3)
    ap.add_argument("--width", type=int, default=160, help="decoder width (a new model)")
    ap.add_argument("--layers", type=int, default=3, help="decoder layers (a new model)")
    ap.add_argument("--heads", type=int, default=5, help="decoder attention heads (a new model)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu", help="cpu, or cuda to train on a GPU")
    ap.add_argument("--workers", type=int, default=0,
                    help="processes rendering scenes and drawing batches (0: all in the training process)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--resume", action="store_true", help="continue from --out (steps and time add up)")
    ap.add_argument("--out", default=str(DEFAULT_OUT))
    ap.add_argument("--cache-only", metavar="I/N", default=None,
                    help="only fill the feature cache: chunk j of the needed ones when j %% N == I, then exit "
                         "(run N such jobs side by side before training)")
    args = ap.parse_args(argv)
    if args.minutes <= 0 or args.batch < 1 or args.scenes < 1:
        print("error: --minutes, --batch and --scenes must be positive", file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)
    return exit_status(fill_cache if args.cache_only else train, args)


def fill_cache(args) -> None:
    """`--cache-only I/N`: the feature chunks of job I of N, then return."""
    device = training_device(args.device)
    me, n_jobs = (int(v) for v in args.cache_only.split("/"))
    need = [("train", "aabb", k) for k in range(-(-args.scenes // CHUNK))]
    need += [("train", "obb", k) for k in range(-(-args.obb_scenes // CHUNK))]
    need += [("test", "aabb", 0), ("test", "obb", 0)]
    for j, (split, task, k) in enumerate(need):
        if j % n_jobs == me:
            cache_chunk(split, task, k, progress=False, device=device, workers=args.workers)
            log(f"cached {split} {task} chunk {k}")


def train(args) -> None:
    """Train (or `--resume`) the grounding model into `--out`, checkpointing every 200 steps."""
    device = training_device(args.device)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    t_start = time.time()
    out = Path(args.out)
    src = tokenizer_source()
    tok = QueryTokenizer.build(src, data.all_query_texts())
    split = dict(device=device, workers=args.workers)
    pools = {"aabb": cached_split("train", "aabb", args.scenes, **split),
             "obb": cached_split("train", "obb", args.obb_scenes, **split)}
    val_pools = {"aabb": cached_split("test", "aabb", 200, **split), "obb": cached_split("test", "obb", 100, **split)}
    log(f"features ready in {time.time() - t_start:.0f}s")
    done_steps, done_min = 0, 0.0
    if args.resume and (out / "config.json").is_file():
        model = GroundingModel.load(out)
        tok = model.tokenizer
        done_steps, done_min = model.cfg.get("train_steps", 0), model.cfg.get("train_minutes", 0.0)
        log(f"resuming from {out} at step {done_steps}")
    else:
        cfg = default_config(len(tok.bpe_ids), args.width, args.layers, args.heads)
        cfg["query_bpe_ids"] = tok.bpe_ids
        if args.cell_aux:
            cfg["cell_head"] = True
        model = GroundingModel(cfg)
        out.mkdir(parents=True, exist_ok=True)
        if src.resolve() != (out / "tokenizer.json").resolve():
            write_bytes(out / "tokenizer.json", src.read_bytes())
    if args.cell_aux and model.cell_head is None:
        raise ValueError(f"--cell-aux needs a model with a cell head; {out} has none (train from scratch)")
    model.to(device)
    trainable = [p for p in model.parameters() if p.requires_grad]
    log(f"{sum(p.numel() for p in trainable) / 1e6:.2f} M trainable parameters")
    opt = torch.optim.AdamW(trainable, lr=args.lr, weight_decay=0.01)
    vrng = random.Random(1)
    val = gather(val_pools, sample_examples(val_pools, 192, vrng, args.obb_share), tok)
    batches = iter(torch.utils.data.DataLoader(Draws(pools, tok, args), batch_size=None, num_workers=args.workers,
                                               multiprocessing_context="fork", prefetch_factor=4)) if args.workers else None
    budget, step = Budget(args.minutes, minutes_before=done_min), done_steps

    def save(extra_min):
        model.save(out, {"train_steps": step, "train_minutes": round(done_min + extra_min, 2),
                         "batch": args.batch, "hard_share": args.hard_share, "cell_aux": args.cell_aux,
                         "train_scenes": args.scenes, "train_obb_scenes": args.obb_scenes})

    while not budget.spent():
        lr = set_learning_rate(opt, warmup_cosine(args.lr, step, budget.progress(), warmup=100))
        if batches is None:
            feats, batch = gather(pools, sample_examples(pools, args.batch, rng, args.obb_share, args.hard_share), tok)
        else:
            draws, made = next(batches)
            feats, batch = gather(pools, draws, tok, made)
        model.train()
        causal, block, cell = losses(model, feats, batch)
        optimizer_step(opt, causal + block + args.cell_aux * cell, trainable)
        step += 1
        if step % 50 == 0:
            model.eval()
            with torch.no_grad():
                vc, vb, vcell = losses(model, *val)
            log(f"step {step} t={budget.elapsed_s:.0f}s lr={lr:.2e} causal={causal.item():.4f} block={block.item():.4f} "
                f"cell={cell.item():.4f} val_causal={vc.item():.4f} val_block={vb.item():.4f} val_cell={vcell.item():.4f}")
        if step % 200 == 0:
            save(budget.elapsed_s / 60)
    model.eval()
    save(args.minutes)
    log(f"saved {out} after {step} steps, {time.time() - t_start:.0f}s in all")


if __name__ == "__main__":
    sys.exit(main())
