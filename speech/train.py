"""Train the speech models on generated speech (see speech/data.py), on the CPU (asr: or a GPU).

    python -m speech.train codec --minutes 6     # RVQ codec      -> speech/weights/codec/
    python -m speech.train asr --minutes 15      # CTC + attention recogniser -> speech/weights/asr/
    python -m speech.train asr-lm                # character 6-gram LM of the training text for ctc_beam,
                                                 # fusion weights tuned on `valid` -> speech/weights/asr/
    python -m speech.train asr-gate              # ctc_speculative's gate tuned on `valid` -> decoding.json
    python -m speech.train tts --minutes 10      # frame TTS (delay + parallel layouts, local transformer,
                                                 # stacked heads, duration predictor) -> speech/weights/tts/
    python -m speech.train tts-flat --minutes 8  # flattened baseline TTS -> speech/weights/tts_flat/
    python -m speech.train tts-delay --minutes 8 # delay-layout TTS (the `delay` decoder) -> speech/weights/tts_delay/
    python -m speech.train tts-stack --minutes 8 # parallel layout + stacked heads + 2-frame local transformer
                                                 # (`stack`, `stack_local`) -> speech/weights/tts_stack/

Each run is bounded by --minutes (wall clock) and uses --threads torch threads (default 1: the
machine is shared). The data are generated on first use (flite + espeak-ng, a few minutes).
`asr --device cuda` trains the recogniser on a GPU (recipe: speech/train_gpu.sh).
"""
from __future__ import annotations

import argparse
import json
import random

import torch

from suite.runtime.storage import write_json
from suite.runtime.training import Budget, ClockBar, optimizer_step, set_learning_rate, warmup_cosine

from . import data, features
from .asr_train import train_asr, train_char_lm, tune_gate
from .codec import WEIGHTS, Codec, CodecConfig
from .tts_train import train_tts


# ---------------------------------------------------------------- codec

def train_codec(minutes: float, seed: int = 0, piper: bool = True) -> dict:
    """The codec on the `train` split for `minutes` of wall clock -> speech/weights/codec."""
    torch.manual_seed(seed)
    rng = random.Random(seed)
    items = data.load_split("train", piper=piper)
    mels, mags = [], []
    with torch.no_grad():
        for it in items:
            a = torch.from_numpy(it["audio"])
            mels.append(features.log_mel(a))
            mags.append(features.log_magnitude(a[None])[0])
    model = Codec(CodecConfig())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
    crop, batch, budget, step = 128, 12, Budget(minutes), 0
    bar = ClockBar(minutes * 60, "codec")
    model.train()
    while not budget.spent():
        mel_b, mag_b = [], []
        for _ in range(batch):
            i = rng.randrange(len(mels))
            f = mels[i].shape[1]
            s = rng.randrange(max(f - crop, 1))
            mel_b.append(_pad_to(mels[i][:, s:s + crop], crop))
            mag_b.append(_pad_to(mags[i][:, s:s + crop], crop))
        mel_b, mag_b = torch.stack(mel_b), torch.stack(mag_b).clamp(min=-9.0)
        z = model.encode_mel(mel_b)
        zq, commit = model.rvq(z)
        pred = model.decode_latent(zq)
        loss = (pred - mag_b).abs().mean() + 0.25 * commit
        set_learning_rate(opt, warmup_cosine(1e-3, step, budget.progress()))
        optimizer_step(opt, loss)
        step += 1
        if step % 20 == 0:
            bar.show(budget.elapsed_s, f"step {step} loss {loss.item():.3f}")
    bar.close()
    model.eval()
    metrics = {"steps": step, "train_minutes": minutes, **evaluate_codec(model, piper=piper)}
    folder = WEIGHTS / "codec"
    model.save(folder)
    write_json(folder / "metrics.json", metrics)
    return metrics


def _pad_to(x: torch.Tensor, n: int) -> torch.Tensor:
    if x.shape[-1] >= n:
        return x[..., :n]
    return torch.nn.functional.pad(x, (0, n - x.shape[-1]), value=float(x.min()))


def evaluate_codec(model: Codec, limit: int = 40, piper: bool = True) -> dict:
    """Held-out voice: log-mel L1 of the Griffin-Lim round trip (and of the original through
    Griffin-Lim from its true magnitude: the vocoder's own floor)."""
    items = data.load_split("heldout", piper=piper)[:limit]
    codec_l1, vocoder_l1 = [], []
    with torch.no_grad():
        for it in items:
            a = torch.from_numpy(it["audio"])[None]
            rec = model.decode(model.encode(a))
            codec_l1.append(_mel_l1(a, rec))
            vocoder_l1.append(_mel_l1(a, features.griffin_lim(features.log_magnitude(a))))
    return {"heldout_mel_l1": sum(codec_l1) / len(codec_l1),
            "griffin_lim_floor_mel_l1": sum(vocoder_l1) / len(vocoder_l1)}


def _mel_l1(a: torch.Tensor, b: torch.Tensor) -> float:
    n = min(a.shape[-1], b.shape[-1])
    ma, mb = features.log_mel(a[..., :n]).clamp(min=-9), features.log_mel(b[..., :n]).clamp(min=-9)
    return float((ma - mb).abs().mean())


# ---------------------------------------------------------------- main

def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m speech.train", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", choices=["data", "codec", "asr", "asr-lm", "asr-gate", "tts", "tts-flat",
                                          "tts-delay", "tts-stack"])
    parser.add_argument("--minutes", type=float, default=None, help="wall-clock training budget")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1: shared machine)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--resume", action="store_true", help="asr/tts: continue from the shipped weights")
    parser.add_argument("--lr", type=float, default=None,
                        help="peak learning rate (asr default 1.5e-3, tts 1e-3)")
    parser.add_argument("--out", default=None, help="asr/tts*: output folder (default speech/weights/<model>); "
                        "run again with the same --out (and asr --resume) to continue its checkpoint")
    parser.add_argument("--asr-config", default=None, help='asr: JSON overrides of ASRConfig for a fresh model, '
                        'e.g. \'{"d_model": 192, "enc_layers": 5}\'')
    parser.add_argument("--extra", action="store_true", help="asr: also train on the `extra` split's voices")
    parser.add_argument("--steps", type=int, default=None, help="asr: stop after this many steps (lr schedule "
                        "by steps) instead of --minutes: load-independent short comparisons")
    parser.add_argument("--keep-best", action="store_true",
                        help="tts*: keep the checkpoint with the best validation loss (checked every --save-every "
                        "minutes), not the last")
    parser.add_argument("--save-every", type=float, default=5.0, help="tts*: minutes between checkpoints")
    parser.add_argument("--delay-share", type=float, default=1 / 3,
                        help="tts: fraction of frame-model examples in the DELAY layout (default 1/3)")
    parser.add_argument("--num-tts", type=int, default=data.NUM_TTS,
                        help=f"tts*: utterances of the `tts` split to train on (default {data.NUM_TTS})")
    parser.add_argument("--bf16", action="store_true", help="asr: bfloat16 autocast (fp32 weights)")
    parser.add_argument("--decoder-rows", type=int, default=None,
                        help="asr: rows of each batch that also train the attention decoder (default all)")
    parser.add_argument("--batch", type=int, default=16, help="asr: utterances per step (default 16)")
    parser.add_argument("--phone-aux", type=float, default=0.0, help="asr: weight of an auxiliary per-frame "
                        "phone loss where flite's phone timings are known (default 0: none)")
    parser.add_argument("--device", default="cpu", help="asr: cpu, or cuda to train on a GPU")
    parser.add_argument("--no-piper", action="store_true",
                        help="data without the Piper voice (speech/data.py --no-piper; cached apart)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    piper = not args.no_piper
    if args.model == "data":
        print(data.build(piper=piper))
        return 0
    if args.model == "codec":
        metrics = train_codec(args.minutes or 6, args.seed, piper=piper)
    elif args.model == "asr":
        metrics = train_asr(args.minutes or 15, args.seed, resume=args.resume, lr=args.lr or 1.5e-3, out=args.out,
                            config=json.loads(args.asr_config) if args.asr_config else None,
                            extra=args.extra, max_steps=args.steps, bf16=args.bf16,
                            decoder_rows=args.decoder_rows, batch=args.batch, device=args.device,
                            phone_aux=args.phone_aux, piper=piper)
    elif args.model == "asr-lm":
        metrics = train_char_lm(out=args.out, piper=piper)
    elif args.model == "asr-gate":
        metrics = tune_gate(out=args.out, piper=piper)
    else:
        kind = args.model.partition("-")[2] or "frame"          # tts -> frame, tts-flat -> flat, ...
        metrics = train_tts(args.minutes or 14, args.seed, kind=kind, resume=args.resume, lr=args.lr or 1e-3,
                            out=args.out, delay_share=args.delay_share, keep_best=args.keep_best,
                            save_every_min=args.save_every, num_tts=args.num_tts, piper=piper)
    print(json.dumps(metrics, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
