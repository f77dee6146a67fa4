"""Training loop of the CTC + attention recogniser (called by `python -m speech.train asr`)."""
from __future__ import annotations

import hashlib
import random
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from suite.decoders.chain.ctc_speculative import ctc_greedy
from suite.runtime.storage import atomic_path, write_json
from suite.runtime.training import Budget, ClockBar, optimizer_step, previous_metrics, set_learning_rate, training_device, \
    warmup_cosine

from . import data, features
from .alignment import PHONES, frame_phones, utterance_phones
from .asr_model import BOS, EOS, WEIGHTS, ASRConfig, Recogniser, ids_to_text, text_to_ids
from .codec import WEIGHTS as CODEC_WEIGHTS, Codec
from .metrics import cer


def _augment(mel: torch.Tensor, rng: random.Random) -> torch.Tensor:
    """SpecAugment-lite on one (80, F) log-mel: two frequency masks, two time masks, a gain."""
    mel = mel.clone() + rng.uniform(-1.0, 1.0)
    for _ in range(2):
        w = rng.randrange(0, 12)
        f0 = rng.randrange(0, 80 - w)
        mel[f0:f0 + w] = mel.mean()
        t = rng.randrange(0, 15)
        t0 = rng.randrange(0, max(mel.shape[1] - t, 1))
        mel[:, t0:t0 + t] = mel.mean()
    return mel


def batch_features(mels: list[torch.Tensor]):
    """list of (80, F_i) -> (B, 80, F) padded with each row's minimum, lengths (B,)."""
    lengths = torch.tensor([m.shape[1] for m in mels])
    out = torch.stack([F.pad(m, (0, int(lengths.max()) - m.shape[1]), value=float(m.min())) for m in mels])
    return out, lengths


def attention_loss(model: Recogniser, enc, enc_len, targets: list[list[int]]):
    """Teacher-forced CE of the decoder over [encoder frames, BOS, chars] -> chars, EOS."""
    prefix = model.bridge(enc)
    emb = model.decoder.get_input_embeddings()
    rows, labels = [], []
    for b, (n, tgt) in enumerate(zip(enc_len.tolist(), targets)):    # one device sync, not one a row
        text_in = emb(torch.tensor([BOS] + tgt, device=enc.device))
        rows.append(torch.cat([prefix[b, :n], text_in]))
        labels.append(torch.tensor([-100] * n + tgt + [EOS], device=enc.device))
    length = max(len(r) for r in rows)
    x = torch.stack([F.pad(r, (0, 0, 0, length - len(r))) for r in rows])
    mask = torch.stack([torch.arange(length, device=enc.device) < len(r) for r in rows]).long()
    y = torch.stack([F.pad(lab, (0, length - len(lab)), value=-100) for lab in labels])
    logits = model.decoder(inputs_embeds=x, attention_mask=mask).logits.float()
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), ignore_index=-100)


def train_phones(items: list[dict], piper: bool = True) -> list[tuple[list[int], list[float]] | None]:
    """Each item's flite phone ids and end times in its own audio (`alignment.utterance_phones`;
    None where the voice is not flite), cached beside the data under a key of the texts and voices;
    flite runs in as many processes as torch has threads."""
    key = hashlib.sha1("\n".join(f"{it['text']}|{it['voice']}" for it in items).encode()).hexdigest()[:12]
    rows = data.cached_json(f"asr_phones-{key}.json", lambda: _flite_timings(items), piper)
    return [tuple(a) if a else None for a in rows]


def _flite_timings(items: list[dict]) -> list:
    from tqdm import tqdm
    jobs = [(it["text"], it["voice"]) for it in items]
    with data.worker_pool(torch.get_num_threads()) as pool:      # --threads processes (16 in the GPU recipe)
        rows = pool.imap(_utterance_phones, jobs, chunksize=16) if pool else map(_utterance_phones, jobs)
        return list(tqdm(rows, total=len(jobs), desc="flite phone timings", file=sys.stderr))


def _utterance_phones(job: tuple[str, str]):
    return utterance_phones(*job)


def frame_labels(phones: list, lengths: list[int], stride: int) -> torch.Tensor:
    """(B, max(lengths)) phone id of each encoder frame (the phone whose span holds the frame's
    centre; frames are stride x 10 ms apart from 0 s), -100 past a row's length or last phone, and
    on rows without timings."""
    out = torch.full((len(phones), max(lengths)), -100, dtype=torch.long)
    step = stride / 100
    for b, aligned in enumerate(phones):
        if aligned:
            ids, ends = aligned
            n = min(lengths[b], int(ends[-1] / step) + 1)
            out[b, :n] = torch.tensor(ids)[frame_phones(ends, n, start_s=-step / 2, frame_rate=1 / step)]
    return out


def speed_perturb(audio, factor: float):
    """Play `audio` (16 kHz) `factor` times faster (pitch and tempo both scale, as in Kaldi's recipe)."""
    return data.resample(audio, int(round(data.SAMPLE_RATE * factor))) if factor != 1.0 else audio


def train_asr(minutes: float, seed: int = 0, resume: bool = False, lr: float = 1.5e-3,
              speeds: tuple[float, ...] = (0.9, 1.1), out=None, checkpoint_minutes: float = 5.0,
              config: dict | None = None, extra: bool = False, max_steps: int | None = None,
              bf16: bool = False, decoder_rows: int | None = None, batch: int = 16, device: str = "cpu",
              phone_aux: float = 0.0, piper: bool = True) -> dict:
    """Train (or --resume) for `minutes` of wall clock on the `train` split (Piper + flite + espeak-ng,
    speech/data.py; with `extra`, also the `extra` split's voices) plus speed-perturbed copies of a
    quarter of it per factor and codec round trips of a twelfth; saves to `out` every
    `checkpoint_minutes` and at the end, with metrics on `valid`, `unseen` and `heldout`.
    `max_steps`: stop there instead (the lr schedule then follows steps, not the clock), so that
    short comparisons do not depend on the load of a shared machine. `bf16`: bfloat16 autocast
    (fp32 weights; about 20% faster a step on this CPU); `decoder_rows`: how many rows of each
    batch of `batch` also train the attention decoder (default all; fewer: cheaper steps, CTC sees
    all). `device`: cuda trains there (features, batches and model; speech/train_gpu.sh); the saved
    weights are CPU tensors either way. `phone_aux`: weight of an auxiliary per-frame phone loss on
    the encoder's middle layer, where flite's phone timings are known (its flite utterances and
    their speed-perturbed copies; a fresh model gets the phone head). `piper`: the data with or
    without the Piper voice (speech/data.py)."""
    device = training_device(device, tf32=False)
    decoder_rows = batch if decoder_rows is None else decoder_rows
    torch.manual_seed(seed)
    rng = random.Random(seed)
    data.complete_train_parts(piper)
    base = data.load_split("train", piper=piper)
    items = base + (data.load_split("extra", piper=piper) if extra else [])
    aligned = train_phones(items, piper) if phone_aux else [None] * len(items)   # forks before CUDA starts
    with torch.no_grad():
        mels = [_log_mel(it["audio"], device) for it in items]
    targets = [text_to_ids(it["text"]) for it in items]
    phones = list(aligned)
    for k, factor in enumerate(speeds):    # speed perturbation (Ko et al. 2015): new pitches and tempi
        subset = items[k::2 * len(speeds)] if speeds else []
        with torch.no_grad():
            mels += [_log_mel(speed_perturb(it["audio"], factor), device) for it in subset]
        targets += [text_to_ids(it["text"]) for it in subset]
        phones += [(a[0], [t / factor for t in a[1]]) if a else None for a in aligned[k::2 * len(speeds)]]
    round_trips = codec_round_trips(base[::12], device, piper)   # also hear Griffin-Lim codec audio (what TTS outputs)
    mels += [m for m, _ in round_trips]
    targets += [t for _, t in round_trips]
    phones += [None] * len(round_trips)
    order = sorted(range(len(mels)), key=lambda i: mels[i].shape[1])
    batches = [order[i:i + batch] for i in range(0, len(order), batch)]
    out = Path(out) if out else WEIGHTS / "asr"
    source = out if (out / "model.safetensors").exists() else WEIGHTS / "asr"
    config = {**(config or {}), **({"phone_classes": len(PHONES)} if phone_aux else {})}
    model = Recogniser.load(source) if resume else Recogniser(ASRConfig(**config))   # resume: continue
    if phone_aux and model.phone_head is None:
        raise ValueError("--phone-aux needs a model with a phone head: train from scratch, not --resume")
    model.to(device)
    previous = previous_metrics(source) if resume else {}
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    budget, step = Budget(None if max_steps else minutes, max_steps), 0
    print(f"asr: {len(mels)} training utterances ({len(items)} generated), {len(batches)} batches, "
          f"{sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters on {device}", file=sys.stderr)
    bar = ClockBar(minutes * 60, "asr")
    last_save = time.time()

    def save(final: bool) -> dict:
        model.eval()
        metrics = {"steps": step + previous.get("steps", 0),
                   "train_minutes": round(budget.elapsed_s / 60 + previous.get("train_minutes", 0), 2),
                   "final": final}
        if final:
            metrics["valid_ctc_cer"] = split_ctc_cer(model, "valid", piper=piper)
            metrics["unseen_ctc_cer"] = split_ctc_cer(model, "unseen", piper=piper)
            metrics["heldout_ctc_cer"] = heldout_ctc_cer(model, piper=piper)
        model.save(out)
        write_json(out / "metrics.json", metrics)
        model.train()
        return metrics

    model.train()
    while not budget.spent(step):
        if time.time() - last_save > checkpoint_minutes * 60:
            save(final=False)
            last_save = time.time()
        idx = rng.choice(batches)
        mel, lengths = batch_features([_augment(mels[i], rng) for i in idx])
        tgt = [targets[i] for i in idx]
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            enc, log_probs, enc_len, *phone_logits = model.encode(mel.to(device), lengths.to(device),
                                                                  phones=phone_aux > 0)
            ctc = F.ctc_loss(log_probs.transpose(0, 1), torch.tensor(sum(tgt, []), device=device), enc_len,
                             torch.tensor([len(t) for t in tgt], device=device), blank=0, zero_infinity=True)
            loss = ctc + 0.5 * attention_loss(model, enc[:decoder_rows], enc_len[:decoder_rows], tgt[:decoder_rows])
            if phone_logits:
                labels = frame_labels([phones[i] for i in idx], enc_len.tolist(), model.config.stride).to(device)
                if (labels >= 0).any():
                    loss = loss + phone_aux * F.cross_entropy(phone_logits[0].flatten(0, 1), labels.flatten(),
                                                              ignore_index=-100)
        set_learning_rate(opt, warmup_cosine(lr, step, budget.progress(step), warmup=150))
        optimizer_step(opt, loss)
        step += 1
        if step % 10 == 0:
            bar.show(budget.elapsed_s, f"step {step} ctc {ctc.item():.3f} loss {loss.item():.3f}")
    bar.close()
    return save(final=True)


def _log_mel(audio, device: torch.device) -> torch.Tensor:
    """(80, F) log-mel of 16 kHz numpy audio, computed on `device`, kept on the CPU."""
    return features.log_mel(torch.from_numpy(audio).to(device)).cpu()


@torch.no_grad()
def codec_round_trips(items: list[dict], device: torch.device | str = "cpu",
                      piper: bool = True) -> list[tuple[torch.Tensor, list[int]]]:
    """(log-mel, target) of items passed through our codec on `device` (skipped when no codec is
    trained), cached in the data's cache folder."""
    from tqdm import tqdm
    weights = CODEC_WEIGHTS / "codec" / "model.safetensors"
    if not weights.exists():
        return []
    key = hashlib.sha1(weights.read_bytes()).hexdigest()[:12] + f"-{len(items)}"
    cached = data.cache_dir(piper) / f"codec_round_trips-{key}.pt"    # Griffin-Lim is slow: compute once per codec
    if cached.exists():
        return torch.load(cached)
    codec = Codec.load().to(device)
    out = []
    for it in tqdm(items, desc="codec round trips", file=sys.stderr):
        audio = codec.decode(codec.encode(torch.from_numpy(it["audio"]).to(device)[None]))[0]
        out.append((features.log_mel(audio).cpu(), text_to_ids(it["text"])))
    with atomic_path(cached) as tmp:
        torch.save(out, tmp)
    return out


@torch.no_grad()
def heldout_ctc_cer(model: Recogniser, limit: int | None = None, piper: bool = True) -> float:
    return split_ctc_cer(model, "heldout", limit, piper)


@torch.no_grad()
def split_ctc_cer(model: Recogniser, split: str, limit: int | None = None, piper: bool = True) -> float:
    """Greedy CTC CER of `model` on a data split (batched by 16)."""
    items = data.load_split(split, piper=piper)[:limit]
    hyps = [ids_to_text(ctc_greedy(lp, len(lp))) for lp in ctc_posteriors(model, items)]
    return cer([it["text"] for it in items], hyps)


@torch.no_grad()
def ctc_posteriors(model: Recogniser, items: list[dict]) -> list[torch.Tensor]:
    """Each utterance's CTC log-probs (F', 29), cut to its encoder length; encoded 16 at a time."""
    out = []
    device = next(model.parameters()).device
    for i in range(0, len(items), 16):
        chunk = items[i:i + 16]
        mel, lengths = batch_features([_log_mel(it["audio"], device) for it in chunk])
        _, log_probs, enc_len = model.encode(mel.to(device), lengths.to(device))
        out += [log_probs[b, :int(enc_len[b])].cpu() for b in range(len(chunk))]
    return out


def train_char_lm(out=None, order: int = 6, grid=((0.0, 0.0), (0.3, 0.5), (0.3, 1.0), (0.5, 0.5), (0.5, 1.0),
                                                  (0.5, 1.5), (0.7, 1.0), (0.7, 1.5), (0.7, 2.0), (1.0, 1.5),
                                                  (1.0, 2.0), (1.0, 2.5)), piper: bool = True) -> dict:
    """Build the character n-gram LM from every training sentence (never `valid` or `heldout`),
    pick (alpha, beta) by CTC prefix beam search CER on `valid`, save next to the recogniser."""
    from .ctc_lm import CharNGramLM, prefix_beam_search
    out = Path(out) if out else WEIGHTS / "asr"
    sentences = data.sentence_splits()["train"]
    lm = CharNGramLM.train(sentences, order=order)
    model = Recogniser.load(out if (out / "model.safetensors").exists() else None)
    items = data.load_split("valid", piper=piper)
    posteriors = ctc_posteriors(model, items)
    refs = [it["text"] for it in items]
    greedy = cer(refs, [ids_to_text(ctc_greedy(lp, len(lp))) for lp in posteriors])
    scores = {}
    for alpha, beta in grid:
        hyps = [ids_to_text(prefix_beam_search(lp, len(lp), lm, alpha, beta)) for lp in posteriors]
        scores[(alpha, beta)] = cer(refs, hyps)
        print(f"asr-lm: alpha {alpha} beta {beta}: valid CER {scores[(alpha, beta)]:.4f} (greedy {greedy:.4f})",
              file=sys.stderr)
    lm.alpha, lm.beta = min(scores, key=scores.get)
    out.mkdir(parents=True, exist_ok=True)
    lm.save(out / "char_lm.json.gz")
    return {"sentences": len(sentences), "order": order, "contexts": len(lm.counts), "alpha": lm.alpha,
            "beta": lm.beta, "valid_greedy_cer": greedy, "valid_beam_cer": scores[(lm.alpha, lm.beta)]}


def tune_gate(out=None, cer_slack: float = 1.05, piper: bool = True) -> dict:
    """Pick ctc_speculative's gate on the `valid` split (never `heldout`): among max_entropy x
    min_ratio settings (realign on) whose CER is at most `cer_slack` x ar's and that still send
    some utterances to the decoder, the one with the fewest decoder forwards; saved as
    decoding.json beside the weights (load_asr reads it)."""
    from .asr import load_asr
    out = Path(out) if out else WEIGHTS / "asr"
    asr = load_asr(out)
    items = data.load_split("valid", piper=piper)
    refs = [it["text"] for it in items]

    def run(decoder, **kw):
        hyps, forwards, wall = [], 0, 0.0
        for it in items:
            res = asr(it["audio"], 16000, decoder=decoder, **kw)
            hyps.append(res.text)
            forwards += res.stats.num_forwards
            wall += res.stats.wall_time_s
        return {"cer": cer(refs, hyps), "forwards": forwards, "wall_s": round(wall, 2)}

    ar = run("ar")
    print(f"asr-gate: ar {ar}", file=sys.stderr)
    rows = []
    for max_entropy in (0.0, 0.5, 0.8, 1.2):
        for min_ratio in (1.0, 0.1):
            row = {"max_entropy": max_entropy, "min_ratio": min_ratio, "realign": True,
                   **run("ctc_speculative", max_entropy=max_entropy, min_ratio=min_ratio, realign=True)}
            rows.append(row)
            print(f"asr-gate: {row}", file=sys.stderr)
    # a gate so loose that no utterance reaches the decoder is plain `ctc`, not speculative decoding
    ok = [r for r in rows if r["cer"] <= cer_slack * ar["cer"] and r["forwards"] > 0] \
        or sorted(rows, key=lambda r: r["cer"])[:1]
    best = min(ok, key=lambda r: (r["forwards"], r["cer"]))
    choice = {k: best[k] for k in ("max_entropy", "min_ratio", "realign")}
    write_json(out / "decoding.json", choice)
    return {"ar_valid": ar, "chosen": best, "grid": rows}
