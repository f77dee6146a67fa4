"""Benchmark the speech decoders on the embedded weights, interleaved in one process.

    python -m speech.bench                       # TTS (8 held-out sentences) + ASR (held-out voice)
    python -m speech.bench --tts 4 --asr 40      # smaller
    python -m speech.bench --quick               # a short run: 2 sentences, 10 utterances
    python -m speech.bench --json bench.json     # also write the numbers
    python -m speech.bench --tts 0 --asr-weights /tmp/asr_run   # ASR rows only, of a new training run
    python -m speech.bench --asr 0 --tts-weights /tmp/tts_run   # TTS rows only, of a new frame model
                                                 # (--tts-flat-weights: of a new flat model)
    python -m speech.bench --asr 0 --tts-decoders flat delay --tts-delay-weights /tmp/tts_delay
                                                 # (also --tts-stack-weights for a tts-stack run)
    python -m speech.bench --model whisper/ --asr 40             # a Whisper folder: its decoders, ASR rows
    python -m speech.bench --model dia/ --tts 4 --seconds 3      # a MusicGen, Dia or CSM folder: TTS rows

TTS, per decoder (every one the shipped checkpoints support: flat, delay, parallel, local_ar,
local_maskgit, stack, stack_local): backbone forwards per frame and per second of audio (and flat's rate over
it; the local transformer's passes are not backbone forwards), real-time factor (backbone + Griffin-Lim
vocoder), intelligibility = CER of our recogniser (ctc) and of pocketsphinx on the generated
audio. Reference rows: the flite slt recording itself and its codec round trip.
ASR, per decoder: CER on the held-out voice (flite rms, unseen sentences), decoder forwards,
real-time factor, speedup over ar; ctc_speculative with its shipped gate and, as a check, exact
(gate off, strict acceptance).
--model DIR: a transformers family's folder instead (hf_asr.py, hf_tts.py, hf_dia.py, hf_csm.py), each of
its decoders on the same inputs, greedy: Whisper as the ASR rows above (speedup and exact match against
its `ar`); a text-to-audio family per decoder, on FAMILY_TEXTS: forwards, frames, real-time factor,
speedup (wall time) and same codes as its exact decoder (delay; CSM's local_ar).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

from suite.models.dtypes import add_dtype_argument
from suite.runtime.storage import write_json

from . import data
from .metrics import cer


def pocketsphinx_transcriber():
    """pocketsphinx (CMU en-US model in the wheel) as an independent recogniser, or None."""
    try:
        from pocketsphinx import Decoder
    except ImportError:
        return None
    dec = Decoder(samprate=16000, loglevel="FATAL")

    def transcribe(audio: np.ndarray) -> str:
        pcm = (np.clip(audio, -1, 1) * 32767).astype(np.int16).tobytes()
        dec.start_utt()
        dec.process_raw(pcm, full_utt=True)
        dec.end_utt()
        hyp = dec.hyp()
        return data.normalize_text(hyp.hypstr) if hyp is not None else ""

    return transcribe


def bench_tts(tts, asr, sphinx, sentences: list[dict], decoders, seed: int) -> list[dict]:
    from tqdm import tqdm
    rows = {d: {"forwards": 0, "frames": 0, "seconds": 0.0, "wall": 0.0, "refs": [], "ours": [], "sphinx": []}
            for d in decoders}
    ref_rows = {name: {"refs": [], "ours": [], "sphinx": []} for name in ("flite slt (recording)", "codec round trip")}
    for item in tqdm(sentences, desc="bench tts", file=sys.stderr):
        text = item["text"]
        recording = item["audio"]
        rt = tts.codec.decode(tts.codec.encode(torch.from_numpy(recording)[None]))[0].numpy()
        for name, audio in (("flite slt (recording)", recording), ("codec round trip", rt)):
            _score(ref_rows[name], text, audio, asr, sphinx)
        for d in decoders:
            res = tts(text, decoder=d, seed=seed)
            r = rows[d]
            r["forwards"] += res.stats.num_forwards
            r["frames"] += res.codes.shape[1]
            r["seconds"] += res.seconds
            r["wall"] += res.stats.wall_time_s
            _score(r, text, res.audio, asr, sphinx)
    out = []
    for name, r in ref_rows.items():
        out.append({"decoder": name, "cer_ours": cer(r["refs"], r["ours"]),
                    "cer_pocketsphinx": cer(r["refs"], r["sphinx"]) if sphinx else None})
    flat = rows.get("flat")
    flat_rate = flat["forwards"] / max(flat["seconds"], 1e-9) if flat else None   # forwards per audio second
    for d, r in rows.items():
        out.append({"decoder": d, "forwards": r["forwards"], "frames": r["frames"], "audio_s": r["seconds"],
                    "forwards_per_audio_s": r["forwards"] / max(r["seconds"], 1e-9),
                    "forwards_per_frame": r["forwards"] / max(r["frames"], 1),
                    "fewer_forwards_than_flat": (flat_rate * r["seconds"] / max(r["forwards"], 1)) if flat else None,
                    "rtf": r["wall"] / max(r["seconds"], 1e-9),
                    "cer_ours": cer(r["refs"], r["ours"]),
                    "cer_pocketsphinx": cer(r["refs"], r["sphinx"]) if sphinx else None})
    return out


def _score(row, text, audio, asr, sphinx) -> None:
    row["refs"].append(text)
    try:
        row["ours"].append(asr(audio, 16000, decoder="ctc").text)
    except ValueError:       # e.g. silent output: counts as an empty transcript
        row["ours"].append("")
    if sphinx:
        row["sphinx"].append(sphinx(audio))


ASR_VARIANTS = {"ctc_speculative (exact: gate off, strict)": ("ctc_speculative", {"max_entropy": 0.0, "min_ratio": 1.0})}


def bench_asr(asr, items: list[dict], decoders=("ar", "ctc", "ctc_beam", "ctc_speculative",
                                                "ctc_speculative (exact: gate off, strict)")) -> list[dict]:
    """`ctc_speculative` runs with the shipped gate (weights/asr/decoding.json); the exact variant
    (no gate, strict acceptance, realign) must give ar's text and shows what verification costs."""
    from tqdm import tqdm
    rows = {d: {"hyps": [], "wall": 0.0, "forwards": 0} for d in decoders}
    seconds = 0.0
    for it in tqdm(items, desc="bench asr", file=sys.stderr):
        seconds += len(it["audio"]) / 16000
        for d in decoders:
            name, options = ASR_VARIANTS.get(d, (d, {}))
            res = asr(it["audio"], 16000, decoder=name, **options)
            rows[d]["hyps"].append(res.text)
            rows[d]["wall"] += res.stats.wall_time_s
            rows[d]["forwards"] += res.stats.num_forwards
    refs = [it["text"] for it in items]
    ar_wall = rows["ar"]["wall"] if "ar" in rows else None
    return [{"decoder": d, "cer": cer(refs, r["hyps"]), "decoder_forwards": r["forwards"],
             "rtf": r["wall"] / seconds, "speedup_vs_ar": (ar_wall / r["wall"]) if ar_wall else None,
             "exact_match_with_ar": (sum(h == a for h, a in zip(r["hyps"], rows["ar"]["hyps"])) / len(items))
             if "ar" in rows else None}
            for d, r in rows.items()]


FAMILY_TEXTS = ("Return a list of cookies.", "Open the file and read it.", "The queue is empty.",
                "Remove an item from the set.", "Close the socket now.", "Print the last line.",
                "Sort the keys by value.", "Wait for the thread to end.")    # short: any family's context holds them


def bench_family_tts(tts, texts: list[str], seconds: float, seed: int) -> list[dict]:
    """Each decoder of a transformers text-to-audio family on the same texts, greedy, interleaved;
    speedup and same codes against the family's exact decoder (its default)."""
    from tqdm import tqdm
    exact = tts.default_decoder
    rows = {d: {"forwards": 0, "frames": 0, "seconds": 0.0, "wall": 0.0, "codes": []} for d in tts.decoders}
    for text in tqdm(texts, desc="bench tts", file=sys.stderr):
        for d in tts.decoders:
            res = tts(text, decoder=d, seconds=seconds, seed=seed, temperature=0.0)
            r = rows[d]
            r["forwards"] += res.stats.num_forwards
            r["frames"] += res.codes.shape[1]
            r["seconds"] += res.seconds
            r["wall"] += res.stats.wall_time_s
            r["codes"].append(res.codes)
    base = rows[exact]
    return [{"decoder": d, "forwards": r["forwards"], "frames": r["frames"], "audio_s": r["seconds"],
             "forwards_per_frame": r["forwards"] / max(r["frames"], 1), "rtf": r["wall"] / max(r["seconds"], 1e-9),
             "speedup_vs_exact": base["wall"] / max(r["wall"], 1e-9),
             f"same_codes_as_{exact}": sum(a.shape == b.shape and bool((a == b).all())
                                           for a, b in zip(r["codes"], base["codes"])) / max(len(texts), 1)}
            for d, r in rows.items()]


def bench_family(args) -> int:
    """`--model DIR`: the decoders of one transformers family folder (Whisper: ASR rows; MusicGen,
    Dia, CSM: TTS rows) on the held-out data."""
    import speech

    from .hf_asr import DECODERS as WHISPER_DECODERS
    from .hf_asr import FAMILIES as ASR_FAMILIES
    from .hf_folder import model_type
    from .tts import load_family_tts, tts_families
    kind, known = model_type(args.model), {**ASR_FAMILIES, **tts_families()}
    if kind not in known:
        print(f"error: {args.model} holds a {kind!r} model; the speech bench knows these transformers families: "
              f"{', '.join(f'{k} ({v[0]})' for k, v in known.items())}", file=sys.stderr)
        return 2
    results = {"threads": args.threads, "model": str(args.model), "family": kind}
    print(f"# speech bench: {kind} from {args.model} ({args.threads} thread(s), {time.strftime('%Y-%m-%d %H:%M')})\n")
    if kind in ASR_FAMILIES:
        items = data.load_split("heldout")[:args.asr]
        results["asr"] = bench_asr(speech.load_asr(args.model), items, decoders=WHISPER_DECODERS)
        print(f"## ASR: {len(items)} held-out utterances, greedy\n")
        print(markdown(results["asr"], ["decoder", "cer", "decoder_forwards", "rtf", "speedup_vs_ar",
                                        "exact_match_with_ar"]) + "\n")
    else:
        tts = load_family_tts(args.model)
        texts = [tts.prompt_prefix + t for t in FAMILY_TEXTS[:args.tts]]
        results["tts"] = bench_family_tts(tts, texts, args.seconds, args.seed)
        exact = tts.default_decoder
        print(f"## TTS: {len(texts)} sentences, at most {args.seconds:g} s each, greedy\n")
        print(markdown(results["tts"], ["decoder", "forwards", "frames", "forwards_per_frame", "rtf",
                                        "speedup_vs_exact", f"same_codes_as_{exact}"]) + "\n")
    if args.json:
        write_json(args.json, results)
    return 0


# "asr" rows: decoder, cer, decoder_forwards, rtf, speedup_vs_ar; "tts" rows: decoder, forwards, rtf, cer_ours, ...
SPEECH_METRIC = "CER of our recogniser on the speech"


def write_page(results: dict, command: str, sampling: str, page=None, folder=None) -> None:
    """BENCHMARKS.md's speech and asr tables and the lossy decoders' CER against ar's (flat `ar` for TTS) in
    speech/quality.json (suite.runtime.bench_page); the sections this run did not measure stay."""
    from suite.registry import REGISTRY
    from suite.runtime.bench_page import (PAGE, Headline, headline_table, machine, quality_entry, write_quality,
                                          write_section)
    page, folder, where = page or PAGE, folder or Path(__file__).parent, machine()

    def lossy(name: str) -> bool:                     # ctc, ctc_beam: other readings than ar's, lossy too
        return name not in REGISTRY or REGISTRY[name].guarantee == "lossy"
    if results.get("asr"):
        rows = {r["decoder"]: r for r in results["asr"]}
        ar, n = rows.get("ar"), results.get("asr_items")
        lines, costs = [], {}
        for name, r in rows.items():
            scored = ar is not None and name != "ar" and lossy(name)
            on = f"{n} held-out utterances"
            lines.append(Headline(name, r["speedup_vs_ar"], f"{r['decoder_forwards']}",
                                  f"CER {r['cer']:.3f} against ar's {ar['cer']:.3f} ({on})" if scored else "",
                                  None if name in REGISTRY else "lossy"))
            if scored:
                costs[name] = quality_entry("CER", f"{r['cer']:.3f}", f"{ar['cer']:.3f}", on, "BENCHMARKS.md, Speech recognition",
                                            command)
        write_section("asr", headline_table(lines, where, command), page)
        write_quality(folder, "asr", costs)
    if results.get("tts"):
        rows = {r["decoder"]: r for r in results["tts"] if "rtf" in r}
        flat, n = rows.get("flat"), results.get("tts_items")
        lines, costs = [], {}
        for name, r in rows.items():
            scored = flat is not None and name != "flat" and lossy(name)
            on = f"{n} held-out sentences, {sampling}"
            lines.append(Headline("ar" if name == "flat" else name, flat["rtf"] / r["rtf"] if flat else None,
                                  f"{r['forwards_per_audio_s']:.1f} / s of audio"
                                  + (f" ({r['fewer_forwards_than_flat']:.2f}x fewer)" if flat else ""),
                                  f"{SPEECH_METRIC} {r['cer_ours']:.3f} against flat ar's {flat['cer_ours']:.3f} ({on})"
                                  if scored else ""))
            if scored:
                costs[name] = quality_entry(SPEECH_METRIC, f"{r['cer_ours']:.3f}", f"{flat['cer_ours']:.3f} (flat)", on,
                                            "BENCHMARKS.md, Speech: text to speech", command)
        write_section("speech", headline_table(lines, where, command), page)
        write_quality(folder, "speech", costs)


def markdown(rows: list[dict], columns: list[str]) -> str:
    def fmt(v):
        if v is None:
            return "-"
        return f"{v:.3f}" if isinstance(v, float) else str(v)
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(fmt(r.get(c)) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


QUICK = {"tts": 2, "asr": 10}


def tts_decoder_names() -> list[str]:
    """Every TTS decoder name the bench may be asked for: flat (the baseline model) and the registry's."""
    import suite
    return ["flat"] + suite.list_decoders("speech")


def check_args(args) -> None:
    """The bench's arguments, checked before any model loads or any data is built (ValueError)."""
    if args.tts < 0 or args.asr < 0:
        raise ValueError(f"--tts and --asr count sentences (0 skips), got {args.tts} and {args.asr}")
    if args.tts_decoders:
        known = tts_decoder_names()
        unknown = [d for d in args.tts_decoders if d not in known]
        if unknown:
            raise ValueError(f"--tts-decoders: unknown {' '.join(unknown)}; choose from {', '.join(known)}")
        if not args.tts:
            raise ValueError("--tts-decoders with --tts 0: give a number of sentences, or drop --tts-decoders")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m speech.bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tts", type=int, default=8, help="held-out sentences for TTS (0 skips)")
    parser.add_argument("--asr", type=int, default=150, help="held-out utterances for ASR (0 skips)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    add_dtype_argument(parser)
    parser.add_argument("--json", help="also write the results to this JSON file")
    parser.add_argument("--asr-weights", default=None,
                        help="recogniser folder to bench (default speech/weights/asr), e.g. a new training run")
    parser.add_argument("--tts-weights", default=None,
                        help="frame TTS folder to bench (default speech/weights/tts), e.g. a new training run; "
                        "the codec stays the shipped one")
    parser.add_argument("--tts-flat-weights", default=None,
                        help="flat TTS folder for the `flat` decoder (default speech/weights/tts_flat)")
    parser.add_argument("--tts-delay-weights", default=None,
                        help="delay TTS folder for the `delay` decoder (default speech/weights/tts_delay when "
                        "shipped, else the frame model's delay layout)")
    parser.add_argument("--tts-stack-weights", default=None,
                        help="stack TTS folder for `stack` and `stack_local` (default speech/weights/tts_stack "
                        "when shipped; else `stack` runs on the frame model's stacked heads and `stack_local` "
                        "is unavailable)")
    parser.add_argument("--tts-decoders", nargs="+", default=None, help="TTS decoders to run (default: all)")
    parser.add_argument("--model", default=None, metavar="DIR",
                        help="bench a transformers family's folder instead: Whisper (ASR rows) or MusicGen, Dia, CSM "
                             "(TTS rows)")
    parser.add_argument("--seconds", type=float, default=2.0, help="--model, text-to-audio: seconds of audio per "
                                                                     "sentence (an upper bound for Dia and CSM)")
    parser.add_argument("--quick", action="store_true",
                        help=f"a short run: {QUICK['tts']} sentences for TTS and {QUICK['asr']} utterances for ASR "
                             "(a smoke test, not a table to quote)")
    from suite.runtime.bench_page import add_write_argument, command_line
    add_write_argument(parser)
    args = parser.parse_args(argv)
    if args.quick:
        args.tts, args.asr = min(args.tts, QUICK["tts"]), min(args.asr, QUICK["asr"])
    try:
        check_args(args)                    # before any model loads or any data is built
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)
    if args.model is not None:
        try:
            return bench_family(args)
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    import speech
    asr = speech.load_asr(args.asr_weights, dtype=args.dtype)
    tts = None
    if args.tts:                            # loaded first: a decoder its checkpoints lack fails before any data
        tts = speech.load_tts(frame=args.tts_weights, delay=args.tts_delay_weights, stack=args.tts_stack_weights,
                              flat=args.tts_flat_weights, dtype=args.dtype)
        missing = [d for d in args.tts_decoders or () if d not in tts.decoders]
        if missing:
            print(f"error: --tts-decoders {' '.join(missing)}: the loaded TTS checkpoints run "
                  f"{', '.join(tts.decoders)}", file=sys.stderr)
            return 2
    results = {"threads": args.threads}
    print(f"# speech bench ({args.threads} thread(s), {time.strftime('%Y-%m-%d %H:%M')})\n")
    if args.asr or args.tts:
        held = data.load_split("heldout")   # the held-out split only (built once, cached, resumable)
    if args.asr:
        items = held[:args.asr]
        results["asr"], results["asr_items"] = bench_asr(asr, items), len(items)
        print(f"## ASR: {len(items)} held-out utterances, voice flite rms (unseen), unseen sentences\n")
        print(markdown(results["asr"], ["decoder", "cer", "decoder_forwards", "rtf", "speedup_vs_ar",
                                        "exact_match_with_ar"]) + "\n")
    if args.tts:
        decoders = args.tts_decoders or list(tts.decoders)
        held_texts = {it["text"] for it in held}
        sentences = [{"text": t, "audio": data.synthesize(t, data.TTS_VOICE)} for t in sorted(held_texts)[:args.tts]]
        results["tts"] = bench_tts(tts, asr, pocketsphinx_transcriber(), sentences, decoders, args.seed)
        results["tts_items"] = len(sentences)
        print(f"## TTS: {len(sentences)} held-out sentences, seed {args.seed}, temperature 0.7, top-k 40\n")
        print(markdown(results["tts"], ["decoder", "forwards", "frames", "forwards_per_frame", "forwards_per_audio_s",
                                        "fewer_forwards_than_flat", "rtf", "cer_ours", "cer_pocketsphinx"]) + "\n")
    if args.write:
        write_page(results, command_line("speech.bench", argv), f"seed {args.seed}, T=0.7")
        print("wrote BENCHMARKS.md (speech) and speech/quality.json", file=sys.stderr)
    if args.json:
        write_json(args.json, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
