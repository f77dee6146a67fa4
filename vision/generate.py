"""Batch image generation with any decoder; writes PNGs and a JSON manifest.

    python -m vision.generate --labels circle star 7 --num-per-label 4 --decoder zipar --out out/
    python -m vision.generate --labels all --decoder sjd --option window=16 --guidance-scale 3 --out out/
    python -m vision.generate --hf-model /models/Emu3-Gen --prompt "a red apple" --grid 32 32 --decoder zipar --out out/

--hf-model loads transformers' own Emu3, Janus or Chameleon checkpoint from a local folder (never
the hub) and decodes it with the same decoders; Chameleon gives codes only (tokens.pt), since
transformers ships no Chameleon VQ decoder.

The job writes into a work folder beside --out (.OUT.partial) and renames it into place only when
every image and the manifest are written: an interrupted job leaves no half-filled --out, and a
rerun resumes from the batches already written. --engine ray generates the batches on a Ray Data
actor pool (--workers N) with the same images (each batch keeps its seed).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path


def parse_options(pairs, decoder: str | None = None) -> dict:
    """--option items, typed and checked by suite.runtime.options for a registered decoder."""
    from suite import parse_option
    from suite.registry import REGISTRY
    if decoder in REGISTRY:
        from suite.runtime.options import parse_options as typed
        return typed(decoder, pairs or [])
    return dict(parse_option(kv) for kv in pairs or [])


def add_generation_arguments(p: argparse.ArgumentParser, decoder: str, unit: str = "images", per_label: str = "") -> None:
    """The flags vision.generate and vision.generate_video share: labels, decoder (`decoder`: its
    pipeline's DEFAULT_DECODER, which the app's tab shows too), sampling, weights, dtype."""
    from suite.models.dtypes import add_dtype_argument
    p.add_argument("--labels", nargs="+", default=None, help="class names or ids, or 'all' (our own prior)")
    p.add_argument("--num-per-label", type=int, default=1, help=f"{unit} per label{per_label}")
    p.add_argument("--decoder", default=decoder, help=f"default: {decoder}, the fastest lossless one measured here "
                   "(BENCHMARKS.md); the app's default too")
    p.add_argument("--option", action="append", help="decoder option key=value (repeatable), e.g. window=3")
    p.add_argument("--guidance-scale", type=float, default=None, help="classifier-free guidance (1 = off)")
    p.add_argument("--temperature", type=float, default=None)
    p.add_argument("--top-k", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--weights", default=None, help="weights folder (default: vision/weights)")
    p.add_argument("--threads", type=int, default=1)
    add_dtype_argument(p)


def label_list(labels: list, classes: list[str]) -> list:
    """--labels as given, or every class id for 'all'."""
    return list(range(len(classes))) if labels == ["all"] else labels


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m vision.generate", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    from .pipeline import DEFAULT_DECODER
    add_generation_arguments(p, DEFAULT_DECODER, "images", " (per prompt with --hf-model)")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--out", required=True, help="output folder (must not exist unless --overwrite)")
    p.add_argument("--overwrite", action="store_true")
    p.add_argument("--hf-model", default=None, help="local folder of an Emu3/Janus/Chameleon checkpoint")
    p.add_argument("--prompt", default=None, help="--hf-model: text prompt (needs the folder's processor)")
    p.add_argument("--prompt-ids", default=None, help="--hf-model: prompt token ids, comma-separated")
    p.add_argument("--grid", nargs=2, type=int, default=None, metavar=("H", "W"),
                   help="--hf-model: token grid (Emu3 needs it; Janus and Chameleon have a fixed one)")
    from suite.runtime.jobs.cli import add_batch_arguments
    add_batch_arguments(p, batch_size=False)      # --batch-size above: images per batch (one input of the job)
    return p


def run(args) -> dict:
    import torch
    from transformers.utils import logging as hf_logging

    from . import load_image_pipeline
    from .pipeline import default_sampling
    torch.set_num_threads(args.threads)
    hf_logging.disable_progress_bar()           # the job's own bar, not one per weights load
    if args.num_per_label < 1 or args.batch_size < 1:
        raise ValueError("--num-per-label and --batch-size must be >= 1")
    if os.path.exists(args.out) and not args.overwrite:
        raise ValueError(f"{args.out} exists; pick a new --out or pass --overwrite")
    check_decoder(args.decoder)
    if args.prompt is not None and not args.prompt.strip():
        raise ValueError("--prompt is empty: describe the image, e.g. --prompt \"a red apple\"")
    if args.hf_model:
        if args.engine != "local":
            raise ValueError("--hf-model runs with --engine local")
        return run_hf(args)
    if not args.labels:
        raise ValueError("give --labels (class names or ids, or 'all'), or --hf-model with --prompt")
    options = parse_options(args.option, args.decoder)
    pipe = load_image_pipeline(args.weights, args.dtype)
    pipe.check(args.decoder, **options)          # option values too, before the job's folder exists
    sampling = default_sampling(pipe)
    settings = {"guidance_scale": sampling["guidance_scale"] if args.guidance_scale is None else args.guidance_scale,
                "temperature": sampling["temperature"] if args.temperature is None else args.temperature,
                "top_k": sampling["top_k"] if args.top_k is None else args.top_k}
    labels = label_list(args.labels, pipe.classes)
    ids = pipe.label_ids(labels)
    jobs = [(c, i) for c in ids for i in range(args.num_per_label)]
    head = {"decoder": args.decoder, **settings, "seed": args.seed, "batch_size": args.batch_size,
            "grid": list(pipe.grid)}
    return _run_label_batches(args, pipe.classes, jobs, settings, options, head)


def check_decoder(name: str) -> None:
    """A decoder that cannot generate images is a user error before any model loads (exit status 2)."""
    import suite
    from .pipeline import DECODERS
    if name not in suite.list_decoders("image"):
        raise ValueError(f"unknown decoder {name!r} for images; choose one of: {', '.join(DECODERS)}")


class GenerateWorker:
    """The batch worker (suite.runtime.jobs): loads the image pipeline once; one call generates one batch
    of labels with its seed into PNG bytes and the batch's stats."""

    def __init__(self, weights=None, decoder=None, settings=None, options=None, threads=None, dtype="float32"):
        from . import load_image_pipeline
        from .pipeline import DEFAULT_DECODER
        self.pipe = load_image_pipeline(weights, dtype)
        self.decoder, self.settings, self.options = decoder or DEFAULT_DECODER, settings or {}, options or {}

    concurrency = 2      # batches in flight at once: they share the prior's forwards (ImagePipeline's scheduler)

    def __call__(self, payload: dict) -> dict:
        import io
        res = self.pipe(payload["labels"], decoder=self.decoder, seed=payload["seed"], **self.settings, **self.options)
        pngs = []
        for img in res.images:
            buf = io.BytesIO()
            img.save(buf, format="PNG")
            pngs.append(buf.getvalue())
        return {"pngs": pngs, "stats": res.stats.as_dict(), "decoder_options": res.settings["decoder_options"]}


def _run_label_batches(args, classes, jobs, settings, options, head) -> dict:
    """One suite.runtime.jobs input per batch of --batch-size images, written into a work folder beside
    --out (kept by an interrupted or failed job, so a rerun resumes) that becomes --out once every
    batch is written."""
    from suite.runtime.jobs.cli import engine_from_args
    from suite.runtime.jobs.items import BatchJob, Item
    from suite.runtime.jobs.run import run_batch
    from suite.runtime.storage import read_json, write_bytes, write_json
    engine = engine_from_args(args, threads=args.threads, batch_size=1)
    out = os.path.abspath(args.out)
    work = os.path.join(os.path.dirname(out), f".{os.path.basename(out)}.partial")
    marks = os.path.join(work, ".batches")
    os.makedirs(marks, exist_ok=True)
    items = []
    for start in range(0, len(jobs), args.batch_size):
        chunk = jobs[start:start + args.batch_size]
        k = start // args.batch_size
        names = [f"{classes[c]}_{i:03d}.png" for c, i in chunk]
        items.append(Item(f"batch {k}", {"labels": [c for c, _ in chunk], "seed": args.seed + k, "names": names,
                                          "indices": [i for _, i in chunk]},
                          (os.path.join(marks, f"{k:05d}.json"), *(os.path.join(work, n) for n in names))))

    def write(item, result) -> None:
        p = item.payload
        for name, png in zip(p["names"], result["pngs"]):
            write_bytes(os.path.join(work, name), png)
        entries = [{"file": n, "label": classes[c], "label_id": c, "batch_seed": p["seed"]}
                   for n, c in zip(p["names"], p["labels"])]
        write_json(item.outputs[0], {"batch": {"seed": p["seed"], "images": len(p["names"]), **result["stats"]},
                                     "images": entries, "decoder_options": result["decoder_options"]})

    worker_args = {"weights": args.weights, "decoder": args.decoder, "settings": settings, "options": options,
                   "threads": args.threads, "dtype": args.dtype}
    job = BatchJob(f"generate ({args.decoder})", items, GenerateWorker, worker_args, write,
                   fields=("pngs", "stats", "decoder_options"), manifest=Path(marks) / "manifest.jsonl",
                   settings={**head, "options": options, "weights": args.weights}, unit="batch")
    t0 = time.perf_counter()
    summary = run_batch(job, engine)
    if summary.failed:
        raise BatchFailed(f"{summary.failed} of {len(items)} batches failed (kept in {work}); run again to resume")
    marks_done = [read_json(it.outputs[0]) for it in items]
    manifest = {**head, "decoder_options": marks_done[-1]["decoder_options"], "num_images": len(jobs),
                "num_forwards": sum(m["batch"]["num_forwards"] for m in marks_done),
                "batches": [m["batch"] for m in marks_done], "images": [e for m in marks_done for e in m["images"]],
                "wall_time_s": time.perf_counter() - t0}
    write_json(os.path.join(work, "manifest.json"), manifest, indent=1)
    shutil.rmtree(marks)
    if os.path.exists(out):
        shutil.rmtree(out)
    os.replace(work, out)
    return manifest


class BatchFailed(Exception):
    """Some inputs of the batch failed (exit status 1)."""


def run_hf(args) -> dict:
    """--hf-model: one prompt, --num-per-label images in batches; PNGs (where the family decodes),
    tokens.pt with every image's codes, and manifest.json, all or nothing."""
    import torch
    from .hf_image import load_hf_image_model
    hf = load_hf_image_model(args.hf_model)
    if args.prompt_ids:
        try:
            ids = torch.tensor([[int(t) for t in args.prompt_ids.split(",")]])
        except ValueError as e:
            raise ValueError(f"--prompt-ids takes comma-separated integers, got {args.prompt_ids!r}") from e
    elif args.prompt:
        ids = hf.prompt_ids(args.prompt)
    else:
        raise ValueError("--hf-model needs --prompt (with the folder's processor) or --prompt-ids")
    options = parse_options(args.option)
    sampling = {"guidance_scale": 1.0 if args.guidance_scale is None else args.guidance_scale,
                "temperature": 1.0 if args.temperature is None else args.temperature, "top_k": args.top_k}
    return _write_all(args, lambda tmp: _hf_batches(args, hf, ids, sampling, options, tmp),
                      {"model": os.path.abspath(args.hf_model), "family": hf.family, "decoder": args.decoder,
                       "decoder_options": options, **sampling, "prompt": args.prompt,
                       "prompt_ids": ids[0].tolist(), "seed": args.seed, "batch_size": args.batch_size})


def _hf_batches(args, hf, ids, sampling, options, tmp) -> dict:
    import torch
    from tqdm import tqdm
    entries, batches, codes = [], [], []
    for start in tqdm(range(0, args.num_per_label, args.batch_size), desc=f"generate ({args.decoder})"):
        n = min(args.batch_size, args.num_per_label - start)
        seed = args.seed + start // args.batch_size
        res = hf.generate(ids.repeat(n, 1), decoder=args.decoder, grid=args.grid, seed=seed, **sampling, **options)
        batches.append({"seed": seed, "images": n, **res.stats.as_dict()})
        codes.append(res.tokens)
        for i in range(n):
            name = f"image_{start + i:03d}.png"
            if res.images is not None:
                res.images[i].save(os.path.join(tmp, name))
            entries.append({"file": name if res.images is not None else None, "index": start + i, "batch_seed": seed})
    torch.save(torch.cat(codes), os.path.join(tmp, "tokens.pt"))
    return {"grid": list(res.tokens.shape[1:]), "num_images": len(entries), "batches": batches, "images": entries,
            "num_forwards": sum(b["num_forwards"] for b in batches)}


def _write_all(args, fill, head: dict) -> dict:
    """Run fill(tmp) in a temporary folder beside --out; rename it into place only when complete."""
    parent = os.path.dirname(os.path.abspath(args.out))
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(dir=parent, prefix=".vision-generate-")
    try:
        t0 = time.perf_counter()
        manifest = {**head, **fill(tmp)}
        manifest["wall_time_s"] = time.perf_counter() - t0
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
    from suite.runtime.jobs.cli import cli_exit
    args = build_parser().parse_args(argv)
    return cli_exit(lambda: report(args), "batches")


def report(args) -> int:
    """Run the job and print its summary line: 0, or 1 when a batch failed."""
    try:
        manifest = run(args)
    except BatchFailed as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    from suite.runtime.options import guarantee_note, quality_costs
    print(f"wrote {manifest['num_images']} images and manifest.json to {args.out} "
          f"({manifest['num_forwards']} forwards, {manifest['wall_time_s']:.1f} s); "
          f"{guarantee_note(args.decoder, quality_costs(Path(__file__).parent, 'image'))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
