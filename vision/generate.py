"""Batch image generation with any decoder; writes PNGs and a JSON manifest.

    python -m vision.generate --labels circle star 7 --num-per-label 4 --decoder zipar --out out/
    python -m vision.generate --labels all --decoder sjd --option window=16 --guidance-scale 3 --out out/

The job writes into a temporary folder beside --out and renames it into place only when every
image and the manifest are written: an interrupted job leaves no half-filled --out.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time


def parse_options(pairs) -> dict:
    out = {}
    for kv in pairs or []:
        if "=" not in kv:
            raise ValueError(f"--option takes key=value, got {kv!r}")
        k, v = kv.split("=", 1)
        for cast in (int, float):
            try:
                out[k] = cast(v)
                break
            except ValueError:
                continue
        else:
            out[k] = v
    return out


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m vision.generate", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--labels", nargs="+", required=True, help="class names or ids, or 'all'")
    p.add_argument("--num-per-label", type=int, default=1)
    p.add_argument("--decoder", default="ar")
    p.add_argument("--option", action="append", help="decoder option key=value (repeatable), e.g. window=3")
    p.add_argument("--guidance-scale", type=float, default=None, help="classifier-free guidance (1 = off)")
    p.add_argument("--temperature", type=float, default=None)
    p.add_argument("--top-k", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--weights", default=None, help="weights folder (default: vision/weights)")
    p.add_argument("--out", required=True, help="output folder (must not exist unless --overwrite)")
    p.add_argument("--overwrite", action="store_true")
    p.add_argument("--threads", type=int, default=1)
    return p


def run(args) -> dict:
    import torch
    from tqdm import tqdm
    from . import load_image_pipeline
    from .pipeline import default_sampling
    torch.set_num_threads(args.threads)
    if args.num_per_label < 1 or args.batch_size < 1:
        raise ValueError("--num-per-label and --batch-size must be >= 1")
    if os.path.exists(args.out) and not args.overwrite:
        raise ValueError(f"{args.out} exists; pick a new --out or pass --overwrite")
    pipe = load_image_pipeline(args.weights)
    sampling = default_sampling(pipe)
    settings = {"guidance_scale": sampling["guidance_scale"] if args.guidance_scale is None else args.guidance_scale,
                "temperature": sampling["temperature"] if args.temperature is None else args.temperature,
                "top_k": sampling["top_k"] if args.top_k is None else args.top_k}
    labels = list(range(len(pipe.classes))) if args.labels == ["all"] else args.labels
    ids = pipe.label_ids(labels)
    jobs = [(c, i) for c in ids for i in range(args.num_per_label)]
    options = parse_options(args.option)
    parent = os.path.dirname(os.path.abspath(args.out))
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(dir=parent, prefix=".vision-generate-")
    try:
        entries, batches, t0 = [], [], time.perf_counter()
        for start in tqdm(range(0, len(jobs), args.batch_size), desc=f"generate ({args.decoder})"):
            chunk = jobs[start:start + args.batch_size]
            seed = args.seed + start // args.batch_size
            res = pipe([c for c, _ in chunk], decoder=args.decoder, seed=seed, **settings, **options)
            batches.append({"seed": seed, "images": len(chunk), **res.stats.as_dict()})
            for (c, i), img, tokens in zip(chunk, res.images, res.tokens):
                name = f"{pipe.classes[c]}_{i:03d}.png"
                img.save(os.path.join(tmp, name))
                entries.append({"file": name, "label": pipe.classes[c], "label_id": c, "batch_seed": seed})
        manifest = {"decoder": args.decoder, "decoder_options": res.settings["decoder_options"], **settings,
                    "seed": args.seed, "batch_size": args.batch_size, "grid": list(pipe.grid),
                    "num_images": len(entries), "wall_time_s": time.perf_counter() - t0,
                    "num_forwards": sum(b["num_forwards"] for b in batches), "batches": batches, "images": entries}
        with open(os.path.join(tmp, "manifest.json"), "w") as f:
            json.dump(manifest, f, indent=1)
        if os.path.exists(args.out):
            shutil.rmtree(args.out)
        os.replace(tmp, args.out)
    finally:
        if os.path.exists(tmp):
            shutil.rmtree(tmp)
    return manifest


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        manifest = run(args)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {manifest['num_images']} images and manifest.json to {args.out} "
          f"({manifest['num_forwards']} forwards, {manifest['wall_time_s']:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
