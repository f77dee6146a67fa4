"""Benchmark: every image decoder vs `ar` on the same labels and seeds, in one process.

    python -m vision.bench                        # all decoders, 10 classes x 2 seeds
    python -m vision.bench --decoders ar zipar --seeds 4 --json out.json
    python -m vision.bench --decoders ar lpd:steps=20 lpd:steps=20,temperature=0.5 --no-fd
    python -m vision.bench --quick                # a short run: 3 labels x 1 seed, no Frechet distance

Prints a markdown table: forwards per image batch, tokens per forward, wall time, speedup over ar
(forwards and wall clock), class accuracy under the classifier trained on real data, and the
Frechet distance (MobileNetV2 features) between generated and held-out images. Decoders run
interleaved per seed so machine load hits them alike. On this CPU a forward over N slots costs
more than one over 1 slot: the wall-clock column says what that leaves of the forward savings.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

from suite.runtime.storage import write_json
from .bench_options import run_bench

DEFAULT_DECODERS = {
    "ar": {},
    "sjd": {"window": 16},
    "mc_sjd": {"window": 16},
    "zipar": {"window": 3},
    "zipar_sjd": {"window": 3, "draft_len": 4},
    "lpd": {"steps": 20},
}


SAMPLING_KEYS = ("guidance_scale", "temperature", "top_k")   # a spec may override these for itself


def parse_spec(spec: str) -> tuple[str, dict]:
    """'zipar:window=2' -> ('zipar', {'window': 2}); 'lpd:temperature=0.5' sets that decoder's sampling."""
    from suite import parse_option
    name, _, rest = spec.partition(":")
    return name, {**DEFAULT_DECODERS.get(name, {}), **dict(parse_option(kv) for kv in filter(None, rest.split(",")))}


def run(pipe, specs, labels, seeds, guidance, temperature, top_k, progress=True):
    import suite
    from tqdm import tqdm
    rows = {s: {"forwards": 0, "tokens": 0, "wall": 0.0, "images": [], "labels": [], "row_steps": [],
                "accepted": []} for s in specs}
    jobs = [(seed, s) for seed in seeds for s in specs]
    for seed, spec in tqdm(jobs, desc="bench", disable=not progress):
        name, opts = parse_spec(spec)
        if name not in suite.DECODERS:
            raise ValueError(f"unknown decoder {name!r}; choose from {', '.join(sorted(suite.DECODERS))}")
        sampling = {"guidance_scale": guidance, "temperature": temperature, "top_k": top_k}
        sampling.update({k: opts.pop(k) for k in SAMPLING_KEYS if k in opts})   # per-spec overrides
        t0 = time.perf_counter()
        res = pipe(labels, decoder=name, seed=seed, **sampling, **opts)
        row = rows[spec]
        row["wall"] += time.perf_counter() - t0
        row["forwards"] += res.stats.num_forwards
        row["tokens"] += res.stats.num_new_tokens
        row["images"] += res.images
        row["row_steps"] += res.stats.steps_per_row()
        row["labels"] += res.labels
    return rows


def score(rows, classifier, fd_net, reference_feats):
    from .metrics import class_accuracy, frechet_distance, mobilenet_features
    base = rows[next(iter(rows))]
    out = []
    for spec, r in rows.items():
        per_image, base_per_image = np.mean(r["row_steps"]), np.mean(base["row_steps"])
        entry = {"decoder": spec, "forwards": r["forwards"], "forwards_per_image": float(per_image),
                 "tokens_per_forward": r["tokens"] / max(sum(r["row_steps"]), 1),
                 "wall_s": r["wall"], "forward_ratio": float(base_per_image / per_image),
                 "wall_speedup": base["wall"] / max(r["wall"], 1e-9),
                 "forward_reduction": float(1 - per_image / base_per_image),
                 "class_accuracy": class_accuracy(classifier, r["images"], r["labels"]) if classifier else None,
                 "images": len(r["images"])}
        entry["frechet"] = (frechet_distance(mobilenet_features(fd_net, r["images"]), reference_feats)
                            if fd_net is not None else None)
        out.append(entry)
    return out


def standard_error(entry) -> float:
    """The class accuracy's binomial standard error: on 100 images a 96% is give or take 2 points."""
    a = entry["class_accuracy"]
    return float(np.sqrt(a * (1 - a) / max(entry["images"], 1)))


def table(results, header: str) -> str:
    lines = [header, "",
             "| decoder | forwards/image | batch forwards | tok/forward | fewer forwards | wall s | wall speedup | class acc | FD |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for e in results:
        acc = "-" if e["class_accuracy"] is None else f"{100 * e['class_accuracy']:.1f}% ±{100 * standard_error(e):.1f}"
        fd = "-" if e["frechet"] is None else f"{e['frechet']:.1f}"
        lines.append(f"| {e['decoder']} | {e['forwards_per_image']:.1f} | {e['forwards']} | {e['tokens_per_forward']:.2f} | "
                     f"{100 * e['forward_reduction']:.0f}% ({e['forward_ratio']:.2f}x) | {e['wall_s']:.1f} | "
                     f"{e['wall_speedup']:.2f}x | {acc} | {fd} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    if (sys.argv[1:] if argv is None else argv)[:1] == ["grounding"]:   # box grounding: vision/grounding/bench.py
        from .grounding.bench import main as grounding_main
        return grounding_main((sys.argv[1:] if argv is None else argv)[1:])
    if (sys.argv[1:] if argv is None else argv)[:1] == ["video"]:       # video: vision/video/bench.py
        from .video.bench import main as video_main
        return video_main((sys.argv[1:] if argv is None else argv)[1:])
    p = argparse.ArgumentParser(prog="python -m vision.bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--decoders", nargs="+", default=None,
                   help="decoder specs, e.g. ar sjd:window=8 zipar:window=2 (ar first is the baseline)")
    p.add_argument("--seeds", type=int, default=2, help="seeds per label (one batch of all labels each)")
    p.add_argument("--first-seed", type=int, default=0, help="seeds run from here (a fresh range checks a choice "
                                                               "made on another)")
    p.add_argument("--labels", nargs="+", default=None, help="class names or ids (default: every class)")
    p.add_argument("--quick", action="store_true",
                   help=f"a short run: {QUICK_LABELS} labels x 1 seed, no Frechet distance (a smoke test, not a table "
                        "to quote)")
    from suite.runtime.bench_page import add_write_argument, command_line
    add_write_argument(p)
    return run_bench(p, argv, lambda args: _main(args, command_line("vision.bench", argv)))


QUICK_LABELS = 3


def check_specs(specs: list[str]) -> None:
    """Every decoder spec names an image decoder and options it takes: a ValueError (exit 2) before
    any model loads or decoder runs."""
    import suite
    image = suite.list_decoders("image")
    for spec in specs:
        name, opts = parse_spec(spec)
        if name not in image:
            raise ValueError(f"unknown image decoder {name!r} in {spec!r}; choose from {', '.join(image)}")
        suite.make_decoder(name, **{k: v for k, v in opts.items() if k not in SAMPLING_KEYS})


def _main(args, command: str = "python -m vision.bench") -> int:
    import suite
    from . import load_image_pipeline
    from .data import make_split
    from .metrics import load_classifier, mobilenet_features, mobilenet_features_model
    from .pipeline import DEFAULT_WEIGHTS, default_sampling
    if args.decoders:
        check_specs(args.decoders)                  # before the model loads or a decoder runs
    if args.quick:
        args.seeds, args.no_fd = 1, True
    pipe = load_image_pipeline(args.weights, args.dtype)
    sampling = default_sampling(pipe)
    guidance = args.guidance_scale if args.guidance_scale is not None else sampling["guidance_scale"]
    temperature = args.temperature if args.temperature is not None else sampling["temperature"]
    top_k = args.top_k if args.top_k is not None else sampling["top_k"]
    specs = args.decoders or [d for d in DEFAULT_DECODERS if d in suite.DECODERS]
    if pipe.prior.config.extra.get("query_offset") is None and not args.decoders and "lpd" in specs:
        specs.remove("lpd")
        print("note: this prior has no LPD position queries (python -m vision.train lpd); skipping lpd",
              file=sys.stderr)
    if parse_spec(specs[0])[0] != "ar":
        specs = ["ar"] + specs
    labels = pipe.label_ids(args.labels or list(range(len(pipe.classes)))[:QUICK_LABELS if args.quick else None])
    classifier = load_classifier(os.path.join(args.weights or DEFAULT_WEIGHTS, "classifier"))
    fd_net = ref = None
    if not args.no_fd:
        fd_net = mobilenet_features_model()
        test, _ = make_split("test", 50)
        ref = mobilenet_features(fd_net, test)
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    rows = run(pipe, specs, labels, seeds, guidance, temperature, top_k)
    results = score(rows, classifier, fd_net, ref)
    refs = references(pipe, classifier, fd_net, ref, per_class=len(rows[specs[0]]["images"]) // len(labels))
    header = (f"{len(labels)} labels x {args.seeds} seeds = {len(labels) * args.seeds} images per decoder, "
              f"{pipe.grid[0]}x{pipe.grid[1]} tokens, guidance {guidance}, temperature {temperature}, "
              f"top_k {top_k}, {torch_threads()} CPU thread(s). forwards/image: forwards until the image was done "
              "(ragged batches advance each image by its own accepted length); batch forwards: summed over "
              "the seeds' batches (the slowest image of each batch decides); tok/forward per image; wall "
              "time for the whole batches; class acc ± its binomial standard error; FD vs 500 held-out images "
              "(real-vs-real floor printed below)")
    print(table(results, header))
    print()
    print("References (same metrics, same image count): " + "; ".join(
        f"{name}: class acc {100 * acc:.1f}%" + (f", FD {fd:.1f}" if fd is not None else "") for name, acc, fd in refs))
    if args.write:
        write_page(results, command)
        print("\nwrote BENCHMARKS.md (images) and vision/quality.json", file=sys.stderr)
    if args.json:
        write_json(args.json, {"settings": header, "results": results,
                               "references": [dict(name=n, class_accuracy=a, frechet=f) for n, a, f in refs]}, indent=1)
    return 0


def write_page(results, command: str, page=None, folder=None) -> None:
    """BENCHMARKS.md's image table (`page`) and, for each lossy decoder run at its bench defaults, its class
    accuracy against ar's in vision/quality.json (in `folder`; suite.runtime.bench_page)."""
    import suite
    from suite.runtime.bench_page import (PAGE, Headline, headline_table, machine, quality_entry, write_quality,
                                          write_section)
    from suite.runtime.options import settings_text
    base = results[0]
    rows, costs = [], {}
    for e in results:
        name, opts = parse_spec(e["decoder"])
        acc, ar_acc = e["class_accuracy"], base["class_accuracy"]
        scored = suite.decoder_entry(name).guarantee == "lossy" and acc is not None and ar_acc is not None
        on = f"{e['images']} images" + (f", {settings_text(opts)}" if opts else "")
        rows.append(Headline(e["decoder"], e["wall_speedup"],
                             f"{e['forwards_per_image']:.1f} / image ({e['forward_ratio']:.2f}x fewer)",
                             f"class accuracy {100 * acc:.1f}% against ar's {100 * ar_acc:.1f}% ({on})" if scored else ""))
        if scored and e["decoder"] == name:              # the bench's own options: what the apps run
            costs[name] = quality_entry("class accuracy", f"{100 * acc:.1f}%", f"{100 * ar_acc:.1f}%", on,
                                        "BENCHMARKS.md, Images", command, options=opts)
    write_section("image", headline_table(rows, machine(), command), page or PAGE)
    write_quality(folder or Path(__file__).parent, "image", costs)


def references(pipe, classifier, fd_net, ref_feats, per_class: int):
    """Real training images and their VQ reconstructions: the ceiling a prior could reach."""
    from .data import make_split, to_tensor, to_uint8
    from .metrics import class_accuracy, frechet_distance, mobilenet_features
    images, labels = make_split("train", max(per_class, 1))
    recon = to_uint8(pipe.tokenizer.decode(pipe.tokenizer.encode(to_tensor(images))))
    out = []
    for name, imgs in (("real train images", images), ("VQ reconstructions", recon)):
        fd = frechet_distance(mobilenet_features(fd_net, imgs), ref_feats) if fd_net is not None else None
        out.append((name, class_accuracy(classifier, imgs, labels), fd))
    return out


def torch_threads() -> int:
    import torch
    return torch.get_num_threads()


if __name__ == "__main__":
    sys.exit(main())
