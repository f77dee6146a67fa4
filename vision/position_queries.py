"""Position queries for LPD (Zhang et al. 2025): teach the raster prior to also predict any cell
from any generated subset, so the same weights serve `ar` and `lpd`.

    python -m vision.train lpd --minutes 25      # continue weights/prior, raster + query objective

Query tokens: id `query_offset + cell` (one learnable embedding per cell, added to the vocabulary),
placed at the cell's own position. A training sequence is laid out in one generation order o
(locality-aware groups, as `suite.decoders.raster.lpd` decodes):

    [class] ++ codes[o] at positions 1 + o ++ queries(o) at positions 1 + o        (1 + 2*H*W,)

with a block-causal mask over the groups: a real code sees the class token and the codes of its
own and earlier groups; a query sees the class token, the codes of earlier groups and the queries
of its own group. The loss reads the query slots only. Each step mixes this objective with the
raster next-token loss, so `ar` keeps (and improves) its quality while `lpd` learns.
"""
from __future__ import annotations

import os
import time

import torch

from suite.runtime.storage import atomic_folder, read_json, write_json
from suite.runtime.training import Budget, log, optimizer_step, previous_metrics, set_learning_rate, training_device, \
    warmup_cosine

from . import data as vdata
from .prior import PRIOR_FILE, cached_codes, encode_split, save_prior
from .tokenizer import VQTokenizer
from .zipar_views import zipar_layout, zipar_loss

QUERY_KEYS = ("query_offset", "lpd")


def add_query_tokens(model, meta: dict) -> dict:
    """Grow the vocabulary by one query token per cell (new rows start at the mean embedding);
    returns the meta with `query_offset`. A prior that has them already is left as is."""
    if "query_offset" in meta:
        return meta
    h, w = meta["grid"]
    offset = meta["codebook_size"] + len(meta["classes"]) + 1
    model.resize_token_embeddings(offset + h * w, mean_resizing=False)
    with torch.no_grad():
        emb = model.get_input_embeddings().weight
        emb[offset:] = emb[:meta["codebook_size"]].mean(0) + 0.02 * torch.randn(h * w, emb.shape[1])
    return {**meta, "query_offset": offset}


def block_mask(sizes: list[int]) -> torch.Tensor:
    """(L, L) bool, L = 1 + 2N, for the layout [class] ++ codes in order ++ queries in order."""
    gid = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))    # (N,) group of slot
    n = len(gid)
    mask = torch.zeros(1 + 2 * n, 1 + 2 * n, dtype=torch.bool)
    mask[:, 0] = True                                                               # everyone sees the class
    mask[1:1 + n, 1:1 + n] = gid[None, :] <= gid[:, None]                           # codes: own + earlier groups
    mask[1 + n:, 1:1 + n] = gid[None, :] < gid[:, None]                             # queries: earlier codes
    mask[1 + n:, 1 + n:] = gid[None, :] == gid[:, None]                             # queries: own group
    return mask


def query_batch(codes: torch.Tensor, class_ids: torch.Tensor, orders: torch.Tensor, offset: int):
    """codes (B, H*W), class_ids (B,), orders (B, H*W) cell permutations ->
    ids (B, L), positions (B, L), targets (B, H*W) for the query slots (the last H*W)."""
    real = codes.gather(1, orders)                                                  # (B, N)
    ids = torch.cat([class_ids[:, None], real, offset + orders], 1)
    pos = torch.cat([torch.zeros_like(class_ids)[:, None], 1 + orders, 1 + orders], 1)
    return ids, pos, real


def query_loss(model, codes, class_ids, orders, offset: int, mask: torch.Tensor, k: int) -> torch.Tensor:
    """Cross-entropy of the query slots' code logits (mean over B * H*W)."""
    ids, pos, targets = query_batch(codes, class_ids, orders, offset)
    n = targets.shape[1]
    m = mask[None, None].expand(len(ids), 1, -1, -1)
    logits = model(input_ids=ids, position_ids=pos, attention_mask=m, logits_to_keep=n).logits[..., :k]
    return torch.nn.functional.cross_entropy(logits.reshape(-1, k), targets.reshape(-1))


def raster_loss(model, seqs: torch.Tensor, k: int) -> torch.Tensor:
    """Next-token cross-entropy over the codes of [class] ++ raster codes (B, 1 + H*W)."""
    logits = model(input_ids=seqs[:, :-1]).logits[..., :k]
    return torch.nn.functional.cross_entropy(logits.reshape(-1, k), seqs[:, 1:].reshape(-1))


def order_pool(h: int, w: int, steps: int, count: int, seed: int) -> tuple[torch.Tensor, list[int]]:
    """(count, H*W) locality-aware orders (cells group by group) and the group sizes."""
    from suite.decoders.raster.lpd import group_sizes, lpd_order
    sizes = group_sizes(h * w, steps)
    g = torch.Generator().manual_seed(seed)
    orders = [sum(lpd_order(h, w, sizes, g), []) for _ in range(count)]
    return torch.tensor(orders), sizes


def train_lpd_model(args, weights: str) -> None:
    """Continue the raster prior (`args.init`, default `weights`/prior) with the mixed raster +
    position-query objective -> `args.out` (default `weights`/prior)."""
    from transformers import LlamaForCausalLM
    torch.manual_seed(args.seed)
    device = training_device(args.device)
    src = args.init or os.path.join(weights, "prior")
    out = args.out or os.path.join(weights, "prior")
    meta = read_json(os.path.join(src, PRIOR_FILE))
    model = LlamaForCausalLM.from_pretrained(src, dtype=torch.float32)
    meta = add_query_tokens(model, meta)
    model.to(device)
    k, c, offset = meta["codebook_size"], len(meta["classes"]), meta["query_offset"]
    h, w = meta["grid"]
    tok = VQTokenizer.load(os.path.join(weights, "tokenizer"))
    tok.vq.to(device)
    images, labels = vdata.make_split("train", args.per_class)
    codes = cached_codes(tok, images, os.path.join(weights, "tokenizer"), args.per_class).reshape(len(images), -1)
    codes, labels = codes.to(device), torch.from_numpy(labels).to(device)
    t0 = time.time()
    orders, sizes = order_pool(h, w, args.lpd_steps, args.orders, args.seed)
    orders, mask = orders.to(device), block_mask(sizes).to(device)
    views = zipar_layout(h, w, args.zipar_window).to(device) if args.zipar_batch else None
    prev_steps = int(previous_metrics(src).get("steps", 0))
    log(f"{len(orders)} locality-aware orders ({args.lpd_steps} steps) in {time.time() - t0:.0f}s; "
        f"from {src} ({prev_steps} steps), query tokens at {offset}")
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01, betas=(0.9, 0.95))
    model.train()
    budget = Budget(args.minutes, args.steps)
    last_save = time.time()
    for step in range(args.steps):
        set_learning_rate(opt, warmup_cosine(args.lr, step, budget.progress(step), warmup=50))
        loss_ar = raster_loss(model, _with_null(torch.cat([labels[:, None] + k, codes], 1), args.batch, k + c), k)
        loss_q = query_loss(model, *_draw(codes, labels, args.lpd_batch, k, k + c),
                            orders[torch.randint(len(orders), (args.lpd_batch,), device=device)], offset, mask, k)
        loss = loss_ar + args.lpd_weight * loss_q
        if views is not None:
            loss_z = zipar_loss(model, *_draw(codes, labels, args.zipar_batch, k, k + c), views, k)
            loss = loss + loss_z
        optimizer_step(opt, loss)
        if step % 25 == 0:
            zipar = f" zipar {loss_z.item():.4f}" if views is not None else ""
            log(f"lpd step {step}/{args.steps} raster {loss_ar.item():.4f} queries {loss_q.item():.4f}{zipar} "
                f"{budget.elapsed_s:.0f}s")
        done = step + 1 == args.steps or budget.spent(step)
        if done or (args.save_every and time.time() - last_save > 60 * args.save_every):
            _save(model, meta, sizes, args, out, prev_steps + step + 1, budget, tok, mask, offset, views)
            model.train()
            last_save = time.time()
        if done:
            log(f"time budget reached at step {step}")
            break


def _draw(codes: torch.Tensor, labels: torch.Tensor, n: int, k: int, null: int):
    """n random training images: their codes (n, H*W) and class tokens, the null class for 10 % (CFG)."""
    idx = torch.randint(len(codes), (n,), device=codes.device)
    return codes[idx], torch.where(torch.rand(n, device=codes.device) < 0.1, null, labels[idx] + k)


def _with_null(seqs: torch.Tensor, batch: int, null: int) -> torch.Tensor:
    x = seqs[torch.randint(len(seqs), (batch,), device=seqs.device)].clone()
    x[torch.rand(batch, device=seqs.device) < 0.1, 0] = null
    return x


@torch.no_grad()
def held_out_losses(model, tok, mask, offset: int, k: int, orders: torch.Tensor, views=None) -> dict:
    """Raster, query (fixed orders) and, given ZipAR views, zipar nats/code on 200 held-out images."""
    test, test_labels = vdata.make_split("test", 20)
    device = mask.device
    codes = encode_split(tok, test).reshape(len(test), -1).to(device)
    cls = torch.from_numpy(test_labels).to(device) + k
    picked = orders[torch.arange(len(codes)) % len(orders)].to(device)
    raster = query = zipar = 0.0
    for i in range(0, len(codes), 20):                     # chunks: (20, 4, 513, 513) attention at most
        part = slice(i, i + 20)
        raster += float(raster_loss(model, torch.cat([cls[part, None], codes[part]], 1), k)) * len(codes[part])
        query += float(query_loss(model, codes[part], cls[part], picked[part], offset, mask, k)) * len(codes[part])
        if views is not None:
            zipar += float(zipar_loss(model, codes[part], cls[part], views, k)) * len(codes[part])
    losses = {"test_loss": raster / len(codes), "test_query_loss": query / len(codes)}
    return {**losses, "test_zipar_loss": zipar / len(codes)} if views is not None else losses


def _save(model, meta, sizes, args, out, steps, budget, tok, mask, offset, views) -> None:
    model.eval()
    h, w = meta["grid"]
    test_orders, _ = order_pool(h, w, args.lpd_steps, 50, seed=12345)
    losses = held_out_losses(model, tok, mask, offset, meta["codebook_size"], test_orders, views)
    log("held-out nats/code: " + ", ".join(f"{key} {v:.4f}" for key, v in losses.items()))
    meta = {**meta, "lpd": {"steps": args.lpd_steps, "group_sizes": sizes}}
    if views is not None:
        meta["zipar_views"] = {"window": args.zipar_window}
    objective = "raster + position queries" + (" + zipar views" if views is not None else "")
    with atomic_folder(os.path.abspath(out)) as tmp:
        save_prior(model, tmp)
        model.to(mask.device)
        write_json(tmp / PRIOR_FILE, meta, indent=1)
        write_json(tmp / "metrics.json", {**losses, "steps": steps, "seconds": budget.elapsed_s,
                                          "objective": objective}, indent=1)
    log(f"saved {out} ({steps} steps)")
