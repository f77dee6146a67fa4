"""Throughput of the batch engines (suite/runtime/jobs/): --engine ray vs --engine local on one run.

    .venv/bin/python scripts/bench_batch.py --prompts 50 --lines 200 --workers 2   [--detector projection]

text: N prompts through `python -m text --input` (the embedded SmolLM2, ar, 16 new tokens);
document: N one-line images through `python -m document` (ar, --detector: the CLI's default line
finder, auto = rapidocr where installed, or projection, which leaves the engines' own cost). Each CLI
runs with its own default threads (text: torch's, document: 1); ray actors get one CPU each. Each
engine runs the same inputs into its own output; the ray engine's wall time includes starting its
local cluster and actors.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path


def timed(main, argv) -> float:
    t0 = time.perf_counter()
    code = main(argv)
    if code not in (0, 1):
        raise SystemExit(f"{argv[0]}: exit {code}")
    return time.perf_counter() - t0


def bench_text(n: int, workers: int, tmp: Path) -> dict:
    from text.__main__ import main
    words = "the quick brown fox jumps over the lazy dog".split()
    src = tmp / "prompts.txt"
    src.write_text("\n".join(" ".join(words[i % 9:] + words[:i % 9]) for i in range(n)) + "\n")
    base = ["--input", str(src), "--decoder", "ar", "--max-new-tokens", "16"]     # each engine's default threads
    local = timed(main, base + ["--output", str(tmp / "local.jsonl")])
    ray = timed(main, base + ["--output", str(tmp / "ray.jsonl"), "--engine", "ray", "--workers", str(workers)])
    same = (tmp / "local.jsonl").read_text() .count("\n") == (tmp / "ray.jsonl").read_text().count("\n")
    return {"job": f"text, {n} prompts", "local_s": local, "ray_s": ray, "same_count": same}


def bench_document(n: int, workers: int, tmp: Path, detector: str = "auto") -> dict:
    from PIL import Image, ImageDraw

    from document import data
    from document.__main__ import main
    src = tmp / "lines"
    src.mkdir()
    font = data._font(data.font_paths()[0], 28)
    for i in range(n):
        img = Image.new("RGB", (520, 70), "white")
        ImageDraw.Draw(img).text((16, 18), f"Invoice {4000 + i}: total ${i * 1.25:.2f}", font=font, fill="black")
        img.save(src / f"line_{i:04d}.png")
    base = [str(src), "--detector", detector]
    local = timed(main, base + ["--out", str(tmp / "doc_local")])
    ray = timed(main, base + ["--out", str(tmp / "doc_ray"), "--engine", "ray", "--workers", str(workers)])
    return {"job": f"document, {n} line images ({detector} line finder)", "local_s": local, "ray_s": ray}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--prompts", type=int, default=50)
    p.add_argument("--lines", type=int, default=200)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--detector", default="auto", choices=["auto", "rapidocr", "projection"],
                   help="the document CLI's line finder (default: its own default)")
    args = p.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        if args.prompts:
            rows.append(bench_text(args.prompts, args.workers, Path(tmp)))
        if args.lines:
            rows.append(bench_document(args.lines, args.workers, Path(tmp), args.detector))
    print("| job | local s | ray s | ray / local throughput |\n|---|---|---|---|")
    for r in rows:
        print(f"| {r['job']} | {r['local_s']:.1f} | {r['ray_s']:.1f} | {r['local_s'] / r['ray_s']:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
