"""Benchmark: every video decoder vs `ar` on the same prompts and seeds, in one process.

    python -m vision.video.bench                              # ar, sjd, mc_sjd, diagonal, video_zipar_sjd, video_zipar
    python -m vision.video.bench --clips 12 --seeds 2 --decoders ar diagonal video_zipar:window=2
    python -m vision.video.bench --no-fd --json out.json

Prints a markdown table: forwards per clip, tokens per forward, wall time, speedup over ar
(forwards and wall clock), per-frame class accuracy (the image classifier on every frame), motion
accuracy (the motion classifier trained on real clips) and the Frechet distance on MobileNetV2
frame features against held-out real frames. Decoders run interleaved per batch so machine load
hits them alike; a references line gives the same metrics on real clips and their VQ round trips.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

from suite.runtime.storage import write_json
from ..bench_options import run_bench

DEFAULT_DECODERS = {
    "ar": {},
    "sjd": {"init": "frame", "window": 16},
    "mc_sjd": {"init": "frame", "window": 16},
    "diagonal": {},
    "video_zipar_sjd": {"draft_len": 8},
    "video_zipar": {"window": 3},
}


def parse_spec(spec: str) -> tuple[str, dict]:
    """'video_zipar:window=2' -> ('video_zipar', {'window': 2})."""
    from suite import parse_option
    name, _, rest = spec.partition(":")
    return name, {**DEFAULT_DECODERS.get(name, {}), **dict(parse_option(kv) for kv in filter(None, rest.split(",")))}


def prompts(count: int) -> tuple[list[int], list[int]]:
    """`count` (class, motion) pairs spread over the visible ones."""
    from .data import PAIRS
    idx = np.linspace(0, len(PAIRS), count, endpoint=False).astype(int) if count < len(PAIRS) else \
        np.arange(count) % len(PAIRS)
    return [PAIRS[i][0] for i in idx], [PAIRS[i][1] for i in idx]


def run(pipe, specs, labels, motions, seeds, frames, batch, sampling, progress=True):
    from tqdm import tqdm
    rows = {s: {"forwards": 0, "tokens": 0, "wall": 0.0, "clips": [], "labels": [], "motions": [], "row_steps": [],
                "codes": []} for s in specs}
    chunks = [(seed, i) for seed in seeds for i in range(0, len(labels), batch)]
    for seed, i, spec in tqdm([(s, i, spec) for s, i in chunks for spec in specs], desc="video bench",
                              disable=not progress):
        name, opts = parse_spec(spec)
        t0 = time.perf_counter()
        res = pipe(labels[i:i + batch], motion=motions[i:i + batch], num_frames=frames, decoder=name, seed=seed,
                   **sampling, **opts)
        row = rows[spec]
        row["wall"] += time.perf_counter() - t0
        row["forwards"] += res.stats.num_forwards
        row["tokens"] += res.stats.num_new_tokens
        row["row_steps"] += res.stats.steps_per_row()
        row["clips"] += res.clips
        row["labels"] += res.labels
        row["motions"] += res.motions
        row["codes"] += list(res.tokens)
    return rows


def clip_scores(clips, labels, motions, classifier, motion_net, fd_net, ref_feats) -> dict:
    """Per-frame class accuracy, motion accuracy (None for clips of another length than the motion
    classifier's) and FD of a list of clips."""
    from ..metrics import frechet_distance, mobilenet_features, predict
    from .metrics import predict_motion
    frames = [f for clip in clips for f in clip]
    frame_labels = np.repeat(labels, [len(c) for c in clips])
    judged = len(clips[0]) == motion_net.frames
    out = {"class_accuracy": float((predict(classifier, frames) == frame_labels).mean()),
           "motion_accuracy": float((predict_motion(motion_net, clips) == np.asarray(motions)).mean()) if judged else None,
           "clips": len(clips), "frames": len(frames)}
    out["frechet"] = frechet_distance(mobilenet_features(fd_net, frames), ref_feats) if fd_net is not None else None
    return out


def score(rows, classifier, motion_net, fd_net, ref_feats):
    base = rows[next(iter(rows))]
    out = []
    for spec, r in rows.items():
        per_clip, base_per_clip = np.mean(r["row_steps"]), np.mean(base["row_steps"])
        same = np.mean([bool((a == b).all()) for a, b in zip(r["codes"], base["codes"])])
        entry = {"decoder": spec, "forwards": r["forwards"], "forwards_per_clip": float(per_clip),
                 "tokens_per_forward": r["tokens"] / max(sum(r["row_steps"]), 1), "wall_s": r["wall"],
                 "forward_ratio": float(base_per_clip / per_clip), "wall_speedup": base["wall"] / max(r["wall"], 1e-9),
                 "same_as_ar": float(same)}
        entry.update(clip_scores(r["clips"], r["labels"], r["motions"], classifier, motion_net, fd_net, ref_feats))
        out.append(entry)
    return out


def motion_text(e: dict, error: bool = False) -> str:
    """Motion accuracy (± its binomial standard error), or why there is none."""
    acc = e["motion_accuracy"]
    if acc is None:
        return "- (clips of another length than the motion classifier's)"
    se = 100 * np.sqrt(acc * (1 - acc) / max(e["clips"], 1))
    return f"{100 * acc:.1f}%" + (f" ±{se:.1f}" if error else "")


def table(results, header: str) -> str:
    lines = [header, "",
             "| decoder | forwards/clip | tok/forward | fewer forwards | wall s | wall speedup | class acc (frames) "
             "| motion acc | FD | codes = ar |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for e in results:
        fd = "-" if e["frechet"] is None else f"{e['frechet']:.1f}"
        lines.append(f"| {e['decoder']} | {e['forwards_per_clip']:.1f} | {e['tokens_per_forward']:.2f} | "
                     f"{e['forward_ratio']:.2f}x | {e['wall_s']:.1f} | {e['wall_speedup']:.2f}x | "
                     f"{100 * e['class_accuracy']:.1f}% | {motion_text(e, True)} | {fd} | "
                     f"{100 * e['same_as_ar']:.0f}% |")
    return "\n".join(lines)


def references(pipe, count, frames, classifier, motion_net, fd_net, ref_feats):
    """Real training clips and their VQ round trips: the ceiling a prior could reach."""
    from .data import PAIRS, make_clips
    from .metrics import vq_round_trip
    clips, labels, motions = make_clips("train", max(1, -(-count // len(PAIRS))), frames=frames)
    clips, labels, motions = clips[:count], labels[:count], motions[:count]
    out = []
    for name, c in (("real clips", clips), ("VQ round trips", vq_round_trip(clips, pipe.tokenizer))):
        out.append((name, clip_scores(list(c), labels, motions, classifier, motion_net, fd_net, ref_feats)))
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m vision.video.bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--decoders", nargs="+", default=None,
                   help="decoder specs, e.g. ar diagonal video_zipar:window=2 (ar first is the baseline)")
    p.add_argument("--clips", type=int, default=12, help="(class, motion) prompts, spread over the visible pairs")
    p.add_argument("--seeds", type=int, default=1, help="seeds per prompt")
    p.add_argument("--first-seed", type=int, default=0)
    p.add_argument("--frames", type=int, default=None, help="frames per clip (default: the prior's)")
    p.add_argument("--batch", type=int, default=12, help="clips decoded together")
    p.add_argument("--first-frame", choices=["auto", "image", "video"], default="auto",
                   help="who draws frame 0: the image prior (the video prior continues), or the video prior; default "
                        "auto: the image prior where the weights have one")
    return run_bench(p, argv, _main)


def _main(args) -> int:
    import torch
    from ..metrics import load_classifier, mobilenet_features, mobilenet_features_model
    from .data import make_clips
    from .metrics import load_motion_classifier
    from .pipeline import DEFAULT_WEIGHTS, load_video_pipeline
    pipe = load_video_pipeline(args.weights, args.dtype)
    weights = args.weights or DEFAULT_WEIGHTS
    frames = args.frames or pipe.max_frames
    specs = args.decoders or list(DEFAULT_DECODERS)
    if parse_spec(specs[0])[0] != "ar":
        specs = ["ar"] + specs
    sampling = {"guidance_scale": args.guidance_scale, "temperature": args.temperature, "top_k": args.top_k,
                "first_frame": pipe.first_frame_of(args.first_frame)}
    labels, motions = prompts(args.clips)
    classifier = load_classifier(os.path.join(weights, "classifier"))
    motion_net = load_motion_classifier(os.path.join(weights, "video", "motion"))
    fd_net = ref = None
    if not args.no_fd:
        fd_net = mobilenet_features_model()
        test, _, _ = make_clips("test", 1, frames=frames)
        ref = mobilenet_features(fd_net, test.reshape(-1, *test.shape[2:]))
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    rows = run(pipe, specs, labels, motions, seeds, frames, args.batch, sampling)
    results = score(rows, classifier, motion_net, fd_net, ref)
    refs = references(pipe, len(labels) * len(seeds), frames, classifier, motion_net, fd_net, ref)
    s = {**pipe.prior.meta.get("sampling", {}), **{k: v for k, v in sampling.items() if v is not None}}
    lay = pipe.prior.layout
    header = (f"{len(labels)} prompts x {len(seeds)} seeds = {len(labels) * len(seeds)} clips per decoder, "
              f"{frames} frames of {lay.height}x{lay.width} codes ({frames * lay.cells} tokens a clip), batches of "
              f"{args.batch}, guidance {s.get('guidance_scale')}, temperature {s.get('temperature')}, top_k "
              f"{s.get('top_k')}, frame 0 by the {sampling['first_frame']} prior, {torch.get_num_threads()} CPU thread(s). forwards/clip: forwards until the clip was "
              "done (ragged batches advance each clip by its own accepted length); tok/forward per clip; wall time "
              "for the whole batches; class acc over every frame; motion acc ± its binomial standard error; FD of "
              "the frames vs held-out real frames; codes = ar: clips whose codes equal ar's (same seed)")
    print(table(results, header))
    print()
    print("References (same clip count): " + "; ".join(
        f"{name}: class acc {100 * r['class_accuracy']:.1f}%, motion acc {motion_text(r)}"
        + (f", FD {r['frechet']:.1f}" if r["frechet"] is not None else "") for name, r in refs))
    if args.json:
        write_json(args.json, {"settings": header, "results": results,
                               "references": [dict(name=n, **r) for n, r in refs]}, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
