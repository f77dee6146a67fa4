"""Batch video generation with any video decoder; writes one MP4 (and GIF) per clip and a JSON manifest.

    python -m vision.generate_video --labels star ring --motions left grow --decoder diagonal --out clips/
    python -m vision.generate_video --labels all --num-frames 4 --decoder video_zipar --gif --out clips/
    python -m vision.generate_video --input requests.txt --decoder video_zipar_sjd --out clips/
    python -m vision.generate_video --input requests.jsonl --out clips/ --engine ray --workers 2

--input takes one request per line: "CLASS [MOTION [FRAMES [SEED]]]" (names or ids) or a JSON
object {"label": ..., "motion": ..., "num_frames": ..., "seed": ...}; what a line leaves out
comes from --motions (its first), --num-frames and --seed (+ the line's index). Blank lines and
lines starting with # are skipped. A bad line (unknown class or motion, a frame count the prior was
not trained for) becomes an error row of the manifest and the batch goes on (exit status 1); a bad
flag is a user error before anything runs (exit status 2).

Each clip is written whole (MP4 H.264, and GIF with --gif; frames enlarged --scale times) together
with its record in OUT/.clips/; OUT/manifest.jsonl has one row per request (ok / skipped / error),
OUT/manifest.json the decoder, its guarantee, forwards and decode time per clip and in total. A
rerun skips the clips already written with the same settings and weights (resume after Ctrl-C or a
crash); --engine ray generates the clips on a Ray Data actor pool with the same files.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
from collections import Counter
from pathlib import Path

from .generate import add_generation_arguments, label_list, parse_options

REQUEST_KEYS = ("label", "motion", "num_frames", "seed")
RECORDS = ".clips"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m vision.generate_video", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    from .video.pipeline import DEFAULT_DECODER
    add_generation_arguments(p, DEFAULT_DECODER, "clips", " and motion")
    p.add_argument("--motions", nargs="+", default=None,
                   help="motion names or ids (default: right); with --labels every label gets every motion")
    p.add_argument("--num-frames", type=int, default=None,
                   help="frames per clip (default: what the prior was trained on)")
    p.add_argument("--first-frame", choices=["auto", "image", "video"], default="auto",
                   help="who draws frame 0: the image prior (weights/prior), the video prior continuing from it "
                        "(clips keep their class far more often: vision/weights/video/README.md), or the video prior; "
                        "default auto: the image prior where the weights have one")
    p.add_argument("--input", default=None, metavar="FILE",
                   help="requests, one per line (see above), instead of --labels")
    p.add_argument("--out", required=True, help="output folder (created; an existing one is resumed)")
    p.add_argument("--gif", action="store_true", help="also write a GIF per clip")
    p.add_argument("--fps", type=float, default=8.0)
    p.add_argument("--scale", type=int, default=4, help="enlarge each frame this many times (64x64 frames are small)")
    from suite.runtime.jobs.cli import add_batch_arguments
    add_batch_arguments(p)
    return p


# -- what the weights can make: read from the prior's own file, without loading the model ---------

def video_meta(weights: str | None) -> dict:
    """classes, motions and frames of the video prior in `weights` (the pipeline's checks use them)."""
    from suite.runtime.storage import read_json
    from .video.pipeline import DEFAULT_WEIGHTS
    from .video.prior import PRIOR_FILE
    path = os.path.join(weights or DEFAULT_WEIGHTS, "video", "prior", PRIOR_FILE)
    if not os.path.isfile(path):
        raise ValueError(f"no video prior at {os.path.dirname(path)}: train one with `python -m vision.video.train "
                         "prior`, or pass --weights FOLDER (with tokenizer/ and video/prior/)")
    return read_json(path)


def weights_id(weights: str | None) -> str:
    """Names the weights' files (name, size, modification time): a retrained prior regenerates the clips."""
    from .video.pipeline import DEFAULT_WEIGHTS
    root = Path(weights or DEFAULT_WEIGHTS)
    files = sorted(p for d in ("tokenizer", "video/prior") for p in (root / d).glob("*") if p.is_file())
    return hashlib.sha1(json.dumps([(str(p.relative_to(root)), p.stat().st_size, p.stat().st_mtime_ns)
                                    for p in files]).encode()).hexdigest()[:12]


def decoder_name(name: str) -> str:
    """The registered video decoder `name` stands for (aliases: zipar), or a ValueError naming the valid ones."""
    from .video.pipeline import ALIASES, DECODERS
    if name not in DECODERS and name not in ALIASES:
        raise ValueError(f"unknown video decoder {name!r}; choose one of: {', '.join(DECODERS + tuple(ALIASES))}")
    return ALIASES.get(name, name)


# -- the requests -----------------------------------------------------------------------------------

def canonical(meta: dict, label, motion, num_frames, seed) -> dict:
    """One request with names for class and motion; a ValueError naming the valid values."""
    from .video.pipeline import check_num_frames, name_ids
    classes, motions = meta["classes"], meta["motions"]
    c, m = name_ids([label], classes, "class")[0], name_ids([motion], motions, "motion")[0]
    check_num_frames(num_frames, int(meta["frames"]))
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed must be an integer, got {seed!r}")
    return {"label": classes[c], "motion": motions[m], "num_frames": int(num_frames), "seed": seed}


def parse_line(line: str) -> dict:
    """A request line -> its given fields (the rest come from the flags)."""
    if line.startswith("{"):
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"not a JSON object ({e.msg}): write "
                             '{"label": "star", "motion": "left"}') from None
        if not isinstance(row, dict):
            raise ValueError("not a JSON object: write {\"label\": \"star\", \"motion\": \"left\"}")
        unknown = sorted(set(row) - set(REQUEST_KEYS))
        if unknown:
            raise ValueError(f"unknown field {', '.join(unknown)}; a request takes {', '.join(REQUEST_KEYS)}")
        return row
    parts = line.split()
    if len(parts) > len(REQUEST_KEYS):
        raise ValueError(f"too many fields ({len(parts)}): write CLASS [MOTION [FRAMES [SEED]]]")
    row = dict(zip(REQUEST_KEYS, parts))
    for key in ("num_frames", "seed"):
        if key in row:
            try:
                row[key] = int(row[key])
            except ValueError:
                raise ValueError(f"{key} must be an integer, got {row[key]!r}") from None
    return row


def file_requests(path: str, meta: dict, defaults: dict) -> list[tuple[str, str, dict]]:
    """(key, file stem, request or {"error": message}) per request line of `path`."""
    source = Path(path)
    if not source.is_file():
        raise ValueError(f"--input {path} is not a file: write one request per line (CLASS [MOTION [FRAMES [SEED]]])")
    out = []
    for number, line in enumerate(source.read_text(encoding="utf-8").splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key = f"{source.name}:{number}"
        try:
            given = parse_line(line)
            request = canonical(meta, **{**defaults, "seed": defaults["seed"] + len(out), **given})
        except (ValueError, TypeError) as e:
            out.append((key, "", {"error": f"{key}: {e}"}))
            continue
        out.append((key, safe_name(f"{number:04d}_{request['label']}_{request['motion']}"), request))
    if not out:
        raise ValueError(f"{path} holds no requests: write one per line (CLASS [MOTION [FRAMES [SEED]]])")
    return out


def flag_requests(args, meta: dict, defaults: dict) -> list[tuple[str, str, dict]]:
    """(key, file stem, request) for every --labels x --motions x --num-per-label; bad flags are a ValueError."""
    if args.num_per_label < 1:
        raise ValueError(f"--num-per-label must be >= 1, got {args.num_per_label}")
    out = []
    for label in label_list(args.labels, meta["classes"]):
        for motion in args.motions or [defaults["motion"]]:
            for i in range(args.num_per_label):
                r = canonical(meta, label, motion, defaults["num_frames"], args.seed + len(out))
                out.append((f"{r['label']} {r['motion']} #{i}", f"{r['label']}_{r['motion']}_{i:03d}", r))
    twice = sorted(k for k, n in Counter(k for k, _, _ in out).items() if n > 1)
    if twice:
        raise ValueError(f"{', '.join(twice)} asked for twice: give each label and motion once (--num-per-label N "
                         "for more clips of one)")
    return out


def safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text)


# -- the worker (suite.runtime.jobs): the only part that runs on a Ray actor ---------------------------

class VideoWorker:
    """Loads the video pipeline once; one call generates one clip into its frames and stats."""

    def __init__(self, weights=None, decoder=None, options=None, sampling=None, threads=None, dtype="float32"):
        from . import load_video_pipeline
        from .video.pipeline import DEFAULT_DECODER
        self.pipe = load_video_pipeline(weights, dtype)
        self.decoder, self.options, self.sampling = decoder or DEFAULT_DECODER, options or {}, sampling or {}

    concurrency = 8      # clips in flight at once: they share the prior's forwards (VideoPipeline's scheduler)

    def __call__(self, payload: dict) -> dict:
        import numpy as np
        if "error" in payload:
            raise ValueError(payload["error"])
        res = self.pipe([payload["label"]], motion=payload["motion"], num_frames=payload["num_frames"],
                        decoder=self.decoder, seed=payload["seed"], **self.sampling, **self.options)
        return {"frames": np.stack([np.asarray(f.convert("RGB")) for f in res.frames]),      # (T, H, W, 3) uint8
                "stats": res.stats.as_dict(), "settings": res.settings}


FIELDS = ("frames", "stats", "settings")


# -- the job ------------------------------------------------------------------------------------------

def run(args) -> int:
    """Build the job from the flags (ValueError: a user error), run it, write manifest.json; the exit status."""
    from suite.runtime.jobs.cli import engine_from_args, run_cli
    job, head = build_job(args)
    engine = engine_from_args(args, threads=args.threads)
    out = Path(args.out)
    out.joinpath(RECORDS).mkdir(parents=True, exist_ok=True)
    code = run_cli(job, engine)
    manifest = write_manifest(out, job.items, head)
    from suite.runtime.options import guarantee_note, quality_costs
    print(f"{out}/manifest.json: {manifest['num_done']} of {manifest['num_clips']} clips written, "
          f"{manifest['num_failed']} failed ({manifest['num_forwards']} forwards, "
          f"{manifest['wall_time_s']:.1f} s decoding); "
          f"{guarantee_note(head['decoder'], quality_costs(Path(__file__).parent, 'video'))}", file=sys.stderr)
    return code


def check_flags(args) -> None:
    if (args.labels is None) == (args.input is None):
        raise ValueError("give --labels (class names or ids, or 'all') or --input FILE (one request per line)")
    if args.fps <= 0 or args.scale < 1:
        raise ValueError(f"--fps must be > 0 and --scale >= 1, got {args.fps} and {args.scale}")
    if Path(args.out).exists() and not Path(args.out).is_dir():
        raise ValueError(f"--out {args.out} is a file: give a folder for the clips")


def job_head(args, decoder: str, options: dict) -> dict:
    """What manifest.json says about the whole job: the decoder, its guarantee (the registry's), options."""
    import suite
    from .video.pipeline import VIDEO_DEFAULTS
    entry = suite.decoder_entry(decoder)
    return {"decoder": decoder, "guarantee": entry.guarantee, "guarantee_summary": entry.summary,
            "reference": entry.reference, "decoder_options": {**VIDEO_DEFAULTS.get(decoder, {}), **options},
            "weights": os.path.abspath(args.weights) if args.weights else None, "fps": args.fps, "scale": args.scale}


def build_job(args):
    """(the suite.runtime.jobs job, the manifest's head): one input per clip, its MP4 (+ GIF) and record."""
    from suite.runtime.jobs.items import BatchJob, Item, fingerprint
    from suite.runtime.storage import read_json, write_json
    from .video.io import write_video
    check_flags(args)
    decoder = decoder_name(args.decoder)
    options = parse_options(args.option, decoder)
    meta = video_meta(args.weights)
    from .video.pipeline import load_video_pipeline
    pipe = load_video_pipeline(args.weights)
    pipe.check(decoder, **options)                 # option values, before any folder exists
    first_frame = pipe.first_frame_of(args.first_frame)
    defaults = {"motion": (args.motions or ["right"])[0], "seed": args.seed,
                "num_frames": int(meta["frames"]) if args.num_frames is None else args.num_frames}
    canonical(meta, meta["classes"][0], defaults["motion"], defaults["num_frames"], args.seed)   # the flags
    requests = file_requests(args.input, meta, defaults) if args.input else flag_requests(args, meta, defaults)
    sampling = {k: v for k, v in (("guidance_scale", args.guidance_scale), ("temperature", args.temperature),
                                  ("top_k", args.top_k)) if v is not None}
    head = job_head(args, decoder, options)
    chosen = sampling if first_frame == "video" else {**sampling, "first_frame": first_frame}   # video: as before
    fp = fingerprint({**head, "sampling": chosen, "gif": args.gif, "weights_id": weights_id(args.weights)})
    sampling["first_frame"] = first_frame
    out = Path(args.out)

    def outputs(stem: str) -> tuple[Path, ...]:
        videos = (out / f"{stem}.mp4",) + ((out / f"{stem}.gif",) if args.gif else ())
        return videos + (out / RECORDS / f"{stem}.json",)     # the record last: written once the videos are

    def done(item: Item) -> bool:
        if not item.outputs or not all(p.exists() for p in item.outputs):
            return False
        record = read_json(item.outputs[-1], default={})
        return record.get("settings_id") == fp and record.get("request") == request_of(item.payload)

    def write(item: Item, result: dict) -> None:
        for path in item.outputs[:-1]:
            write_video(path, result["frames"], args.fps, args.scale)
        s = result["settings"]
        write_json(item.outputs[-1], {"input": item.key, "request": request_of(item.payload), "settings_id": fp,
                                      "files": [p.name for p in item.outputs[:-1]], **result["stats"],
                                      **{k: s[k] for k in ("guidance_scale", "temperature", "top_k", "top_p")}})

    items = [Item(key, {**request, "stem": stem}, outputs(stem) if stem else (), error=request.get("error"))
             for key, stem, request in requests]                  # a bad line: an error row, no worker
    worker_args = {"weights": args.weights, "decoder": decoder, "options": options, "sampling": sampling,
                   "threads": args.threads, "dtype": args.dtype}
    return BatchJob(f"generate video ({decoder})", items, VideoWorker, worker_args, write, fields=FIELDS,
                    manifest=out / "manifest.jsonl", settings={"settings_id": fp}, is_done=done, unit="clip"), head


def request_of(payload: dict) -> dict:
    return {k: payload[k] for k in REQUEST_KEYS}


def write_manifest(out: Path, items: list, head: dict) -> dict:
    """OUT/manifest.json: the head, one entry per request (its record, or its manifest row's error), totals."""
    from suite.runtime.jobs.items import read_manifest
    from suite.runtime.storage import read_json, write_json
    rows = read_manifest(out / "manifest.jsonl")
    clips = []
    for item in items:
        record = read_json(item.outputs[-1], default=None) if item.outputs else None
        row = rows.get(item.key, {})
        if record is not None and row.get("status") in ("ok", "skipped"):
            clips.append({"status": "ok", **record})
        else:
            clips.append({"input": item.key, "status": row.get("status", "pending"),
                          "message": row.get("message", "not run yet")})
    ok = [c for c in clips if c["status"] == "ok"]
    manifest = {**head, "num_clips": len(items), "num_done": len(ok),
                "num_failed": sum(c["status"] == "error" for c in clips),
                "num_forwards": sum(c["num_forwards"] for c in ok),
                "num_new_tokens": sum(c["num_new_tokens"] for c in ok),
                "wall_time_s": sum(c["wall_time_s"] for c in ok), "clips": clips}
    write_json(out / "manifest.json", manifest, indent=1)
    return manifest


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return run(args)
    except ValueError as e:          # a bad flag, before anything runs
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
