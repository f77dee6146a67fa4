"""`python -m text.train_draft`: train the EAGLE draft head of the embedded SmolLM2 (see
suite/decoders/chain/eagle_head.py) from the target's own greedy outputs, on this CPU.

Stages (each resumable; the data and checkpoints live in the cache folder, `--work`):
  1. data: the prompt set of text/draft_prompts.py (chat, code, input-grounded), split by source
     into training and held-out prompts; the target generates greedily for each (batched) and its
     last hidden state at every position is kept (fp16 shards);
  2. vocabulary: the K most frequent tokens of the generated text (FR-Spec); the coverage of each
     candidate K on the held-out outputs is logged;
  3. training: the head's first step is teacher-forced on the target's features; steps 2..U are
     EAGLE-3's training-time test (the head reads its own predicted features, attending to the
     true context as at inference); loss = smooth L1 on the features + cross-entropy against the
     target's distribution over the K tokens; warmup + cosine within the time budget;
  4. evaluation on the held-out outputs: the draft's top-1 acceptance at each depth and the mean
     accepted length of a chain; written with the weights to text/weights/eagle/.

examples:
  python -m text.train_draft                         # the shipped run: 1 thread
  python -m text.train_draft --minutes 5 --prompts 64 --out /tmp/eagle   # a smoke run
"""
from __future__ import annotations

import argparse
import random
import sys
import time
from collections import Counter
from pathlib import Path

import torch

from suite.runtime.training import cpu_budget, log

WEIGHTS = Path(__file__).parent / "weights" / "eagle"
KINDS = ("chat", "code", "grounded")
MIX = {"chat": 0.4, "code": 0.25, "grounded": 0.35}
K_CHOICES = (1024, 2048, 4096, 8192, 16384, 32768)


# -- 1. data --------------------------------------------------------------------------------------

def encode(tok, prompt: dict) -> list[int]:
    if prompt["chat"]:
        text = tok.apply_chat_template([{"role": "user", "content": prompt["text"]}],
                                       add_generation_prompt=True, tokenize=False)
        return tok(text, add_special_tokens=False).input_ids
    return tok(prompt["text"]).input_ids


@torch.no_grad()
def generate_rows(model, rows: list[list[int]], max_new: int, eos: int, pad: int) -> list[dict]:
    """Greedy outputs of a batch of prompts and the target's last hidden state at every position
    but the last: {"tokens": (L,), "hidden": (L-1, D) fp16, "prompt_len"} per row."""
    width = max(len(r) for r in rows)
    ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows])
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
    out = model.generate(ids, attention_mask=mask, max_new_tokens=max_new, do_sample=False, eos_token_id=eos,
                         pad_token_id=pad, output_hidden_states=True, return_dict_in_generate=True)
    hidden = torch.cat([step[-1] for step in out.hidden_states], 1)     # (B, width + steps - 1, D)
    result = []
    for b, r in enumerate(rows):
        new = out.sequences[b, width:].tolist()
        if eos in new:
            new = new[:new.index(eos) + 1]
        tokens = r + new
        h = hidden[b, width - len(r):width - len(r) + len(tokens) - 1]
        result.append({"tokens": torch.tensor(tokens, dtype=torch.int32), "hidden": h.half().clone(),
                       "prompt_len": len(r)})
    return result


def build_data(model, tok, prompts: list[dict], folder: Path, batch: int, max_new: int, name: str,
               minutes: float | None = None) -> list[dict]:
    """Generate (or reuse) the shards of `prompts` in `folder` (shortest prompts first); no new
    shard is started after `minutes` (None: all); returns every row."""
    from tqdm import tqdm
    folder.mkdir(parents=True, exist_ok=True)
    eos = model.config.eos_token_id
    encoded = sorted(((encode(tok, p), p) for p in prompts), key=lambda e: len(e[0]))
    batches = [encoded[i:i + batch] for i in range(0, len(encoded), batch)]
    rows, budget, made, t0 = [], cpu_budget(minutes), 0, time.time()
    for i, group in enumerate(tqdm(batches, desc=f"data ({name})", file=sys.stderr)):
        path = folder / f"{name}_{i:04d}.pt"
        if path.is_file():
            rows += torch.load(path)
            continue
        if budget.spent():
            log(f"data {name}: time budget reached, {i} of {len(batches)} shards")
            break
        part = generate_rows(model, [e[0] for e in group], max_new, eos, eos)
        for r, (_, p) in zip(part, group):
            r["kind"], r["source"] = p["kind"], p["source"]
        tmp = path.with_suffix(".tmp")
        torch.save(part, tmp)
        tmp.replace(path)
        rows += part
        made += sum(len(r["tokens"]) - r["prompt_len"] for r in part)
        log(f"data {name} shard {i + 1}/{len(batches)}: {made / (time.time() - t0):.0f} generated tok/s")
    return rows


def prompt_sets(n_train: int, n_held: int) -> tuple[list[dict], list[dict]]:
    from .draft_prompts import build_prompts, split
    per = {k: round(n_train * MIX[k]) for k in KINDS}
    held = {k: n_held // len(KINDS) for k in KINDS}
    train, heldout = split(build_prompts(), per, held)
    return [p.as_dict() for p in train], [p.as_dict() for p in heldout]


# -- 2. vocabulary ----------------------------------------------------------------------------------

def generated(rows):
    for r in rows:
        yield from r["tokens"][r["prompt_len"]:].tolist()


def frequent_tokens(rows, vocab_size: int) -> list[int]:
    counts = Counter(generated(rows))
    order = [t for t, _ in counts.most_common()]
    seen = set(order)
    return order + [t for t in range(vocab_size) if t not in seen]   # unseen tokens last, by id


def coverage(order: list[int], rows, ks=K_CHOICES) -> dict[int, float]:
    tokens = list(generated(rows))
    rank = {t: i for i, t in enumerate(order)}
    return {k: sum(rank[t] < k for t in tokens) / max(len(tokens), 1) for k in ks}


def pick_k(cov: dict[int, float], target: float = 0.95) -> int:
    """The smallest of 4096/8192/16384 whose coverage reaches `target` (else 16384): each doubling
    of K costs about one more target-forward percent per drafted node on this CPU."""
    return next((k for k in (4096, 8192, 16384) if cov[k] >= target), 16384)


# -- 3. training ---------------------------------------------------------------------------------------

def unroll_masks(n: int, depth: int, device=None) -> torch.Tensor:
    """(n, depth*n) bool: at unroll step `depth` (1-based) position j sees step 1's keys at positions
    <= j - depth + 1 and step m's key (m >= 2) at position j - depth + m (its ancestors at inference)."""
    i = torch.arange(n, device=device)
    blocks = [(i[None, :] <= i[:, None] - depth + 1)]
    for m in range(2, depth + 1):
        blocks.append(i[None, :] == i[:, None] - depth + m)
    return torch.cat(blocks, 1)


def sample_batch(rows, tokens: int, context: int, rng: random.Random):
    """Windows of training rows, up to `tokens` positions in all: (features, next tokens, target
    features, positions, loss mask), each (B, T, ...); a window keeps `context` prompt positions."""
    picks, total = [], 0
    while total < tokens:
        r = rows[rng.randrange(len(rows))]
        start = max(0, r["prompt_len"] - context)
        end = len(r["tokens"]) - 1          # pairs (h_j, x_{j+1}) for j < end; targets h_{j+1} for j < end - 1
        if end - start < 4:
            continue
        picks.append((r, start, end))
        total += end - start
    width = max(e - s for _, s, e in picks)
    d = picks[0][0]["hidden"].shape[1]
    feat = torch.zeros(len(picks), width, d)
    nxt = torch.zeros(len(picks), width, dtype=torch.long)
    target = torch.zeros(len(picks), width, d)
    pos = torch.zeros(len(picks), width, dtype=torch.long)
    mask = torch.zeros(len(picks), width, dtype=torch.bool)
    for b, (r, s, e) in enumerate(picks):
        n = e - s
        feat[b, :n] = r["hidden"][s:e].float()
        nxt[b, :n] = r["tokens"][s + 1:e + 1].long()
        target[b, :n - 1] = r["hidden"][s + 1:e].float()
        pos[b, :n] = torch.arange(s, e)
        j = torch.arange(s, e)
        mask[b, :n] = (j + 1 >= r["prompt_len"]) & (j < e - 1)   # the target feature is of a generated position
        mask[b, n:] = False
    return feat, nxt, target, pos, mask


def unrolled(head, feat, nxt, pos, unroll: int):
    """The head's predicted features (B, T, D) at each of `unroll` draft steps: step 1 is teacher-forced
    on the target's features; at step m >= 2 position j reads the feature predicted at j - 1 by step
    m - 1 and attends to every earlier step's keys as `unroll_masks` says (its ancestors at inference)."""
    n = feat.shape[1]
    out, k, v = head.step(feat, nxt, pos, return_kv=True)
    yield out
    for step in range(2, unroll + 1):
        shifted = torch.cat([torch.zeros_like(out[:, :1]), out[:, :-1]], 1)
        out, k, v = head.step(shifted, nxt, pos, unroll_masks(n, step, feat.device)[None, None], past=(k, v),
                              return_kv=True)
        yield out


def unrolled_loss(head, feat, nxt, target, pos, mask, unroll: int, decay: float = 0.8):
    """The summed loss of `unroll` draft steps and each step's top-1 accuracy."""
    with torch.no_grad():
        p_target = torch.softmax(head.logits(target[mask]), -1)                  # (M, K)
        top = p_target.argmax(-1)
    losses, accs = [], []
    for step, out in enumerate(unrolled(head, feat, nxt, pos, unroll), 1):
        valid = mask.clone()
        valid[:, :step - 1] = False
        m = valid[mask]
        logits = head.logits(out[mask])
        ce = -(p_target * torch.log_softmax(logits, -1)).sum(-1)
        reg = torch.nn.functional.smooth_l1_loss(out[mask], target[mask], reduction="none").mean(-1)
        losses.append(decay ** (step - 1) * ((ce + reg) * m).sum() / m.sum().clamp(min=1))
        accs.append(float(((logits.argmax(-1) == top) & m).sum() / m.sum().clamp(min=1)))
    return sum(losses), accs


@torch.no_grad()
def evaluate(head, rows, unroll: int, context: int, max_rows: int = 200) -> dict:
    """Top-1 acceptance of each draft depth on held-out rows (depth d given depths < d were right,
    as a chain verifies) and the mean accepted length of a chain of `unroll` drafts."""
    head.eval()
    hits = [0] * unroll
    tries = [0] * unroll
    lengths = []
    for r in rows[:max_rows]:
        if len(r["tokens"]) - 1 - max(0, r["prompt_len"] - context) < 4:
            continue
        feat, nxt, target, pos, mask = sample_batch([r], 1, context, random.Random(0))
        # run every unroll step teacher-forced on tokens, own features (as at inference)
        p_top = head.logits(target).argmax(-1)
        right = [head.logits(out).argmax(-1) == p_top for out in unrolled(head, feat, nxt, pos, unroll)]  # (1, n) each
        # a chain drafted after the target's position j: depth d predicts position j + d
        idx = mask[0].nonzero().flatten().tolist()
        ok = set(idx)
        for j in idx:
            run = 0
            for d in range(unroll):
                jj = j + d
                if jj not in ok:
                    break
                tries[d] += 1
                if not bool(right[d][0, jj]):
                    break
                hits[d] += 1
                run += 1
            lengths.append(run)
    head.train()
    return {"acceptance_per_depth": [h / max(t, 1) for h, t in zip(hits, tries)],
            "mean_accepted_chain": sum(lengths) / max(len(lengths), 1)}


def train(head, rows, held, args, work: Path) -> dict:
    from suite.runtime.training import warmup_cosine
    ckpt = work / "checkpoint.pt"
    params = [p for p in head.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.0, betas=(0.9, 0.95))
    step, spent = 0, 0.0
    if ckpt.is_file() and not args.fresh:
        state = torch.load(ckpt)
        head.load_state_dict(state["head"])
        opt.load_state_dict(state["opt"])
        step, spent = state["step"], state["spent_s"]
        log(f"resumed at step {step} ({spent / 60:.1f} min trained)")
    budget = cpu_budget(args.minutes - spent / 60, None, spent / 60)
    rng = random.Random(step)
    last_save, ema = time.time(), None
    head.train()
    while not budget.spent():
        lr = warmup_cosine(args.lr, step, budget.progress(), warmup=args.warmup)
        for g in opt.param_groups:
            g["lr"] = lr
        loss, accs = unrolled_loss(head, *sample_batch(rows, args.batch_tokens, args.context, rng), args.unroll)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        step += 1
        ema = accs if ema is None else [0.95 * e + 0.05 * a for e, a in zip(ema, accs)]
        if step % 10 == 0:
            log(f"step {step} {spent / 60 + budget.elapsed_s / 60:.1f}/{args.minutes:.0f} CPU min loss {float(loss.detach()):.3f} lr {lr:.2e} "
                f"top-1 per step " + " ".join(f"{a:.3f}" for a in ema))
        if time.time() - last_save > 120:
            _save_checkpoint(ckpt, head, opt, step, spent + budget.elapsed_s)
            last_save = time.time()
    _save_checkpoint(ckpt, head, opt, step, spent + budget.elapsed_s)
    return {"steps": step, "train_minutes": spent / 60 + budget.elapsed_s / 60}


def _save_checkpoint(path, head, opt, step, spent):
    tmp = path.with_suffix(".tmp")
    torch.save({"head": head.state_dict(), "opt": opt.state_dict(), "step": step, "spent_s": spent}, tmp)
    tmp.replace(path)


# -- 4. the weights folder ---------------------------------------------------------------------------------

def write_readme(out: Path, info: dict) -> None:
    acc = info["eval"]["acceptance_per_depth"]
    cov = "\n".join(f"| {k} | {c:.3f} |" for k, c in info["coverage"].items())
    depth = "\n".join(f"| {d + 1} | {a:.3f} |" for d, a in enumerate(acc))
    text = f"""# EAGLE draft head for SmolLM2-135M-Instruct

One Llama-style decoder layer (EAGLE, Li et al. 2024) that reads the target's last hidden state and
the next token's embedding and predicts the next hidden state; its logits go through the target's
LM head restricted to the {info['draft_vocab_size']} most frequent tokens of the training outputs
(FR-Spec). The target's embeddings and LM head are borrowed, not stored: {info['parameters'] / 1e6:.2f} M
parameters here, {info['bytes'] / 1e6:.1f} MB in fp16. Used by `decoder="eagle"` (and `auto`) on the embedded model.

Command: `{info['command']}` ({info['threads']} thread): data {info['data_minutes']:.1f} min,
training {info['train_minutes']:.1f} min ({info['steps']} steps of about {info['batch_tokens']} positions,
{info['unroll']} unrolled draft steps, training-time test as in EAGLE-3).

## Data
{info['train_prompts']} training prompts built offline by text/draft_prompts.py ({info['mix']}): chat
templates over subjects, completion prompts from documented functions of Python's standard library, and
input-grounded tasks over standard-library code and docstrings. The target's own greedy outputs
(at most {info['max_new_tokens']} new tokens, {info['train_tokens']} generated tokens) and its
teacher-forced last hidden states are the training data. {info['held_prompts']} held-out prompts come
from subjects and modules training never saw (`held_out.json`, also the bench's held-out group).

## Reduced vocabulary (coverage of the held-out outputs by the K most frequent training tokens)

| K | coverage |
|---|---|
{cov}

## Held-out acceptance (top-1 draft equals the target's greedy token, depth d given depths < d right)

| depth | acceptance |
|---|---|
{depth}

Mean accepted length of a {len(acc)}-token chain: {info['eval']['mean_accepted_chain']:.2f} tokens per step
(plus the target's own token). Trees (top-k at each depth) accept more; see BENCHMARKS.md.
"""
    (out / "README.md").write_text(text)


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python -m text.train_draft", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--minutes", type=float, default=28.0, help="training budget in CPU minutes of this process (the data stage comes before)")
    p.add_argument("--prompts", type=int, default=900, help="training prompts")
    p.add_argument("--held-out", type=int, default=48, help="held-out prompts (evaluation only)")
    p.add_argument("--data-minutes", type=float, default=20.0,
                   help="no new training shard is started after this (the held-out shard always is)")
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--gen-batch", type=int, default=48)
    p.add_argument("--draft-vocab", default="auto", help="K, the reduced draft vocabulary's size; auto: the "
                   "smallest of 4096/8192/16384 covering 95%% of the held-out outputs")
    p.add_argument("--unroll", type=int, default=3, help="draft steps trained per position (training-time test)")
    p.add_argument("--batch-tokens", type=int, default=1024)
    p.add_argument("--context", type=int, default=96, help="prompt positions kept before the generated part")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--warmup", type=int, default=30)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--work", type=Path, default=None, help="data and checkpoints (default: the cache folder)")
    p.add_argument("--out", type=Path, default=WEIGHTS)
    p.add_argument("--fresh", action="store_true", help="ignore an existing checkpoint")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    from suite.decoders.chain.eagle_head import EagleHead
    from suite.runtime.storage import cache_dir, write_json
    from .model import load_embedded

    work = args.work or cache_dir("eagle-train")
    work.mkdir(parents=True, exist_ok=True)
    model, tok = load_embedded(progress=True)
    train_p, held_p = prompt_sets(args.prompts, args.held_out)
    log(f"{len(train_p)} prompts for training, {len(held_p)} held out; work folder {work}")
    t_data = time.time()
    data = work / f"data-{args.prompts}-{args.held_out}-{args.max_new_tokens}"
    rows = build_data(model, tok, train_p, data, args.gen_batch, args.max_new_tokens, "train", args.data_minutes)
    held = build_data(model, tok, held_p, data, args.gen_batch, args.max_new_tokens, "held")
    data_minutes = (time.time() - t_data) / 60
    log(f"data: {len(rows)} rows, {sum(1 for _ in generated(rows))} generated tokens ({data_minutes:.1f} min)")

    order = frequent_tokens(rows, model.config.vocab_size)
    cov = coverage(order, held)
    log("held-out coverage by K: " + ", ".join(f"{k}: {c:.3f}" for k, c in cov.items()))
    k = pick_k(cov) if args.draft_vocab == "auto" else int(args.draft_vocab)
    log(f"draft vocabulary K = {k}")
    head = EagleHead.for_target(model.config, k)
    head.vocab_ids.copy_(torch.tensor(order[:k]))
    head.bind_target(model)
    for p in (head.embed, head.lm_rows):
        p.requires_grad_(False)
    result = train(head, rows, held, args, work)
    ev = evaluate(head, held, args.unroll, args.context)
    log(f"held-out acceptance per depth {[round(a, 3) for a in ev['acceptance_per_depth']]}, "
        f"mean accepted chain {ev['mean_accepted_chain']:.2f}")

    head.eval()
    n_params = sum(p.numel() for p in head.parameters())
    info = {"command": "python -m text.train_draft" + "".join(f" {a}" for a in (argv or sys.argv[1:])),
            "threads": args.threads, "data_minutes": data_minutes, **result, "eval": ev,
            "coverage": {str(k): round(c, 4) for k, c in cov.items()}, "draft_vocab_size": k,
            "parameters": n_params, "bytes": 2 * n_params + 4 * k, "unroll": args.unroll,
            "batch_tokens": args.batch_tokens, "train_prompts": len(rows), "held_prompts": len(held_p),
            "mix": ", ".join(f"{int(100 * MIX[k])}% {k}" for k in KINDS), "max_new_tokens": args.max_new_tokens,
            "train_tokens": sum(1 for _ in generated(rows))}
    args.out.mkdir(parents=True, exist_ok=True)
    head.save(args.out, {"target": "SmolLM2-135M-Instruct", "architecture": "EagleHead"})
    write_json(args.out / "metrics.json", info)
    write_json(args.out / "held_out.json", held_p)
    write_readme(args.out, info)
    log(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
