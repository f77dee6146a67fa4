"""Ground a referring expression in images: boxes drawn on a copy of each image.

    python -m vision.ground photo.png "the red circle"                     # -> photo.grounded.png
    python -m vision.ground photo.png "the red bar" --task obb --decoder ar --out boxes.png
    python -m vision.ground scans/ "the face" --out grounded/               # a folder, with a progress bar
    python -m vision.ground photo.png "a cat" --model florence2/ --decoder ngram   # a transformers family

Prints one JSON line per image (boxes in pixels, scores, forwards). Outputs are written to a
temporary file and renamed, so an interrupted run never leaves a half-written image.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

IMAGE_EXTS = {".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff", ".webp"}
COLOURS = ((255, 0, 200), (0, 200, 255), (255, 160, 0), (0, 220, 90))


def draw(image, result):
    """A copy of the image with each box outlined (rotated boxes as polygons) and its score."""
    from PIL import ImageDraw
    img = image.convert("RGB").copy()
    d = ImageDraw.Draw(img)
    width = max(2, round(max(img.size) / 250))
    for k, (poly, score) in enumerate(zip(result.polygons(), result.scores)):
        colour = COLOURS[k % len(COLOURS)]
        d.polygon([tuple(map(float, p)) for p in poly], outline=colour, width=width)
        x = min(p[0] for p in poly)
        y = min(p[1] for p in poly)
        label = f"{k + 1}" + ("" if score is None or score != score else f" {score:.2f}")
        d.text((x + 2, max(y - 12, 0)), label, fill=colour)
    if not result.boxes:
        d.text((4, 4), "no match" if result.no_match else "no box", fill=(255, 0, 0))
    return img


def image_bytes(img, suffix: str) -> bytes:
    import io
    buf = io.BytesIO()
    img.save(buf, format=(suffix.lstrip(".").upper().replace("JPG", "JPEG") or "PNG"))
    return buf.getvalue()


class GroundWorker:
    """The batch worker (suite.runtime.jobs): loads the grounding model once, grounds `query` in one image
    per call into the drawn image's bytes and its JSON record."""

    def __init__(self, query: str, decoder=None, task="aabb", weights=None, threads=None, dtype="float32"):
        from vision.grounding.pipeline import load_grounding_pipeline
        self.grd = load_grounding_pipeline(weights, threads=threads, dtype=dtype)
        decoder = decoder or self.grd.default_decoder     # ours: pipeline.DEFAULT_DECODER (the app's too); a family's: ar
        self.grd.decoder_for(decoder, {}, task)    # an unknown decoder fails before the first image
        self.query, self.decoder, self.task = query, decoder, task
        from suite.runtime.options import guarantee_note, quality_costs
        self.guarantee = guarantee_note(decoder, quality_costs(Path(__file__).parent, "grounding"))

    def __call__(self, payload: dict) -> dict:
        from vision.grounding.pipeline import load_image
        src, dst = Path(payload["src"]), Path(payload["dst"])
        image = load_image(src)
        res = self.grd(image, self.query, decoder=self.decoder, task=self.task)
        rec = {"image": str(src), "output": str(dst), "query": self.query, "decoder": self.decoder,
               "guarantee": self.guarantee, "boxes": [[round(v, 1) for v in b] for b in res.boxes],
               "scores": [None if s is None else round(s, 3) for s in res.scores], "no_match": res.no_match,
               "forwards": res.stats.row_forwards}
        if res.angles is not None:
            rec["angles"] = [round(a, 4) for a in res.angles]
        return {"image": image_bytes(draw(image, res), dst.suffix), "record": rec}


def targets(src: Path, out: str | None) -> list[tuple[Path, Path]]:
    if src.is_dir():
        files = sorted(p for p in src.iterdir() if p.suffix.lower() in IMAGE_EXTS and not p.name.startswith("."))
        if not files:
            raise ValueError(f"no images ({', '.join(sorted(IMAGE_EXTS))}) in folder {src}")
        dest = Path(out) if out else src / "grounded"
        return [(p, dest / (p.stem + ".png")) for p in files]
    if not src.exists():
        raise ValueError(f"no such file or folder: {src}")
    return [(src, Path(out) if out else src.with_name(src.stem + ".grounded.png"))]


def main(argv=None) -> int:
    from suite.models.dtypes import add_dtype_argument
    from suite.runtime.jobs.cli import add_batch_arguments, engine_from_args, run_cli
    from suite.runtime.jobs.items import BatchJob, Item
    from vision.grounding.pipeline import DECODERS, DEFAULT_DECODER
    ap = argparse.ArgumentParser(prog="python -m vision.ground", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("input", help="an image file or a folder of images")
    ap.add_argument("query", help='what to find, e.g. "the red circle", "the face", "the word cat"')
    ap.add_argument("--out", default=None, help="output image (file input) or folder (folder input)")
    ap.add_argument("--decoder", default=None,
                    help=f"{', '.join(DECODERS)} (default {DEFAULT_DECODER}: the fastest lossless one measured here, "
                         "the app's default too); a family's (--model): ar (default) and the exact chain decoders "
                         "(ngram, lookahead, jacobi, speculative)")
    ap.add_argument("--task", default="aabb", choices=["aabb", "obb"], help="axis-aligned or oriented boxes")
    ap.add_argument("--model", "--weights", dest="weights", default=None, metavar="DIR",
                    help="model folder: ours (default vision/weights/grounding) or a transformers family's "
                         "(Florence-2, PaliGemma, Kosmos-2, saved with its processor)")
    ap.add_argument("--threads", type=int, default=None)
    add_dtype_argument(ap)
    add_batch_arguments(ap)
    args = ap.parse_args(argv)

    def write(item, result) -> None:
        dst = item.outputs[0]
        dst.parent.mkdir(parents=True, exist_ok=True)
        write_bytes(dst, result["image"])
        print(json.dumps(result["record"]), flush=True)

    from suite.runtime.storage import write_bytes
    try:
        if not args.query.strip():
            raise ValueError("empty query: say what to find, e.g. \"the red circle\" or \"the face\"")
        src = Path(args.input)
        jobs = targets(src, args.out)
        engine = engine_from_args(args, threads=args.threads)
        worker_args = {"query": args.query, "decoder": args.decoder, "task": args.task, "weights": args.weights,
                       "threads": args.threads, "dtype": args.dtype}
        job = BatchJob("grounding", [Item(str(s), {"src": str(s), "dst": str(d)}, (d,)) for s, d in jobs],
                       GroundWorker, worker_args, write, fields=("image", "record"), unit="img", ordered=True,
                       manifest=jobs[0][1].parent / "manifest.jsonl" if src.is_dir() else None)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return run_cli(job, engine)


if __name__ == "__main__":
    sys.exit(main())
