"""Ground a referring expression in images: boxes drawn on a copy of each image.

    python -m vision.ground photo.png "the red circle"                     # -> photo.grounded.png
    python -m vision.ground photo.png "the red bar" --task obb --decoder ar --out boxes.png
    python -m vision.ground scans/ "the face" --out grounded/               # a folder, with a progress bar

Prints one JSON line per image (boxes in pixels, scores, forwards). Outputs are written to a
temporary file and renamed, so an interrupted run never leaves a half-written image.
"""
from __future__ import annotations

import argparse
import json
import os
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


def save_atomic(img, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    img.save(tmp, format=(path.suffix.lstrip(".").upper().replace("JPG", "JPEG") or "PNG"))
    os.replace(tmp, path)


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
    ap = argparse.ArgumentParser(prog="python -m vision.ground", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("input", help="an image file or a folder of images")
    ap.add_argument("query", help='what to find, e.g. "the red circle", "the face", "the word cat"')
    ap.add_argument("--out", default=None, help="output image (file input) or folder (folder input)")
    ap.add_argument("--decoder", default="hybrid", help="ar, parallel_box or hybrid (default)")
    ap.add_argument("--task", default="aabb", choices=["aabb", "obb"], help="axis-aligned or oriented boxes")
    ap.add_argument("--weights", default=None, help="model folder (default: vision/weights/grounding)")
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args(argv)
    from tqdm import tqdm
    try:
        if not args.query.strip():
            raise ValueError("empty query: say what to find, e.g. \"the red circle\" or \"the face\"")
        jobs = targets(Path(args.input), args.out)
        from vision.grounding.pipeline import load_grounding_pipeline, load_image
        grd = load_grounding_pipeline(args.weights, threads=args.threads)
        grd.decoder_for(args.decoder, {})
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    failed = 0
    for src, dst in tqdm(jobs, desc="grounding", unit="img", disable=len(jobs) == 1, file=sys.stderr):
        try:
            image = load_image(src)
            res = grd(image, args.query, decoder=args.decoder, task=args.task)
            save_atomic(draw(image, res), dst)
        except ValueError as e:
            print(f"error: {src}: {e}", file=sys.stderr)
            failed += 1
            continue
        rec = {"image": str(src), "output": str(dst), "query": args.query, "decoder": args.decoder,
               "boxes": [[round(v, 1) for v in b] for b in res.boxes],
               "scores": [round(s, 3) for s in res.scores], "no_match": res.no_match,
               "forwards": res.stats.row_forwards}
        if res.angles is not None:
            rec["angles"] = [round(a, 4) for a in res.angles]
        print(json.dumps(rec), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
