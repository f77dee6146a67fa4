"""Batch OCR over files and folders: `python -m document INPUT --out DIR [--decoder ar|block_diffusion|s2d2|ctc_speculative]`.

INPUT is an image (PNG/JPEG/TIFF/BMP/WebP), a PDF, or a folder searched recursively. For each
input file FILE the outputs are DIR/FILE.txt, DIR/FILE.json (pages, line boxes, text,
confidence, check, source) and DIR/FILE.pN.png overlays (--overlay). A PDF page with a text layer
gives that text (source "text_layer") unless --ocr always; pages and images without one are read
by OCR (source "ocr"). Lines whose calibrated confidence
is below the weights' threshold are marked "check": true in the JSON, and the run ends with a
"check these" list of them (document/confidence.py). Every output is written to a temporary
file and renamed into place; the JSON is written last and marks the file as done, so a rerun
skips finished files (resumable; --force redoes them). A file that cannot be read (corrupt or
password-protected PDF, not an image, 1x1 or huge image) is reported and skipped; the batch goes
on; each file's status is a row of DIR/manifest.jsonl. With --engine ray the files are read by a
pool of Ray Data actors (--workers N), with the same outputs. Exit status: 0 all read, 1 some files
failed, 2 bad arguments.

examples:
  python -m document scans/ --out ocr_out
  python -m document report.pdf --out ocr_out --decoder ar --overlay
  python -m document report.pdf --out ocr_out --ocr always          # OCR even pages that have a text layer
  python -m document scans/ --out ocr_out --decoder block_diffusion --block-size 4 --threshold 0.9 --prefix-only
  python -m document report.pdf --out ocr_out --model got-ocr2/ --decoder ngram    # a page-reading VLM folder
  python -m document report.pdf --out ocr_out --model got-ocr2/ --regions          # its text regions as one batch
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from .reader import DEFAULT_DECODER, IMAGE_SUFFIXES, PDF_SUFFIXES, REGIONS_NEED_MODEL


def find_inputs(root: Path, out: Path) -> tuple[list[Path], list[Path]]:
    """(readable files, other files) under root; the output folder is never scanned."""
    if root.is_file():
        return [root], []
    files = sorted(p for p in root.rglob("*") if p.is_file() and out.resolve() not in p.resolve().parents)
    known = IMAGE_SUFFIXES | PDF_SUFFIXES
    return [p for p in files if p.suffix.lower() in known], [p for p in files if p.suffix.lower() not in known]


def write_atomic(path: Path, data: str | bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        if isinstance(data, bytes):
            tmp.write_bytes(data)
        else:
            tmp.write_text(data, encoding="utf-8")
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def png_bytes(image) -> bytes:
    import io
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return buf.getvalue()


def outputs_for(src: Path, root: Path, out: Path) -> Path:
    rel = src.name if root.is_file() else str(src.relative_to(root))
    return out / rel


def read_file(src: Path, ocr, args) -> dict:
    """The contents of one file's outputs: text, JSON, overlay PNGs (--overlay), pages and lines."""
    from .reader import overlay, read, to_json, to_text
    if src.stat().st_size == 0:
        raise ValueError(f"{src} is empty (0 bytes): nothing to read; copy the file again")
    model = getattr(args, "model", None)          # a page-reading VLM (--model), else our line OCR
    pages = read(src, ocr=ocr, decoder=args.decoder, detector=args.detector, dpi=args.dpi, model=model,
                 regions=getattr(args, "regions", False), ocr_mode=getattr(args, "ocr", "auto"), **args.options)
    return {"text": to_text(pages), "json": to_json(pages, str(src)),
            "overlays": [png_bytes(overlay(p)) for p in pages] if args.overlay else [],
            "pages": len(pages), "lines": sum(len(p.lines) for p in pages),
            "check": [(p.index + 1, i + 1, line.confidence, line.text) for p in pages
                      for i, line in enumerate(p.lines) if line.check]}


def write_outputs(base: Path, contents: dict) -> None:
    """Each output written atomically, the JSON last (it marks the file done); if writing fails part
    way, the outputs already written for this file are removed."""
    outputs = [(base.with_name(base.name + ".txt"), contents["text"])]
    outputs += [(base.with_name(f"{base.name}.p{i + 1}.png"), png) for i, png in enumerate(contents["overlays"])]
    outputs.append((base.with_name(base.name + ".json"), contents["json"]))
    written = []
    try:
        for path, content in outputs:
            write_atomic(path, content)
            written.append(path)
    except BaseException:
        for path in written:
            path.unlink(missing_ok=True)
        raise


def process(src: Path, base: Path, ocr, args) -> tuple[int, int]:
    """Read one file and write its outputs (everything is computed first): (pages, lines)."""
    contents = read_file(src, ocr, args)
    write_outputs(base, contents)
    return contents["pages"], contents["lines"]


class DocumentWorker:
    """The batch worker (suite.runtime.jobs): loads the OCR model once, reads one file per call."""

    def __init__(self, weights=None, threads=1, decoder=DEFAULT_DECODER, detector=None, dpi=200, options=None,
                 overlay=False, model=None, max_new_tokens=None, regions=False, dtype="float32", ocr_mode="auto"):
        import torch

        from .hf_reader import MAX_NEW_TOKENS, load_reader
        from .ocr import load_ocr
        if model is not None:           # a page-reading VLM reads whole pages: our line OCR is not needed
            torch.set_num_threads(threads)
            self.ocr, model = None, load_reader(model, max_new_tokens or MAX_NEW_TOKENS)
        else:
            self.ocr = load_ocr(weights, threads=threads, dtype=dtype)
        self.args = argparse.Namespace(decoder=decoder, detector=detector, dpi=dpi, options=options or {},
                                       overlay=overlay, model=model, regions=regions, ocr=ocr_mode)

    def __call__(self, payload: dict) -> dict:
        return read_file(Path(payload["src"]), self.ocr, self.args)


CHECK_LIST = 20           # lines of the "check these" list printed at most (all are in the JSON)


def check_list(outcomes) -> str:
    """The lines marked check, least confident first: 'file p.N line M (confidence): text'."""
    items = sorted((c[2], o.item.key, c) for o in outcomes if o.status == "ok" for c in o.result.get("check", ()))
    if not items:
        return ""
    out = [f"check these ({len(items)} lines below the confidence threshold"
           + (f"; the {CHECK_LIST} least confident shown, all marked in the JSON" if len(items) > CHECK_LIST else "")
           + "):"]
    out += [f"  {key} p.{page} line {line} ({conf:.2f}): {text}" for _, key, (page, line, conf, text) in items[:CHECK_LIST]]
    return "\n".join(out)


def summary_table(rows: list[tuple[str, str, str, str, str, str]]) -> str:
    head = ("file", "status", "pages", "lines", "seconds", "message")
    widths = [max(len(r[i]) for r in rows + [head]) for i in range(6)]
    fmt = lambda r: "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |"
    return "\n".join([fmt(head), "|" + "|".join("-" * (w + 2) for w in widths) + "|"] + [fmt(r) for r in rows])


def parse(argv):
    from suite.models.dtypes import add_dtype_argument
    from suite.runtime.jobs.cli import add_batch_arguments
    ap = argparse.ArgumentParser(prog="python -m document", description=__doc__.split("\n\n")[0],
                                 epilog=__doc__.split("examples:")[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("input", help="an image, a PDF, or a folder (searched recursively)")
    ap.add_argument("--out", required=True, help="output folder")
    ap.add_argument("--decoder", default=DEFAULT_DECODER,
                    help=f"ar, block_diffusion, s2d2, ctc_speculative, jacobi, ... (default {DEFAULT_DECODER}: the "
                         "fastest lossless one on a CPU here, since this small model's drafts cost more than they "
                         "save; the app's default too)")
    from suite.registry import DEFAULTS
    bd = DEFAULTS["document"]["block_diffusion"]
    ap.add_argument("--block-size", type=int, default=None,
                    help=f"block size (block_diffusion: default {bd['block_size']}; s2d2: "
                         f"{DEFAULTS['document']['s2d2']['block_size']})")
    ap.add_argument("--threshold", type=float, default=None,
                    help=f"confidence threshold (block_diffusion: default {bd['threshold']})")
    ap.add_argument("--prefix-only", action=argparse.BooleanOptionalAction, default=None,
                    help=f"block_diffusion: fill only the confident run after the head (default: "
                         f"{'on' if bd['prefix_only'] else 'off'}; the defaults give 3.1x fewer forwards at +0.28 CER "
                         "points on held-out lines, this model)")
    ap.add_argument("--detector", default=None, choices=["auto", "rapidocr", "projection"],
                    help="line detector (default: auto, i.e. the fast XY cut on a clean page, else rapidocr when "
                         "installed; projection with --regions)")
    ap.add_argument("--dpi", type=int, default=200, help="PDF rendering resolution")
    ap.add_argument("--ocr", default="auto", choices=["auto", "never", "always"],
                    help="PDFs: auto (default) takes a page's text layer where it has one (exact, in lines with "
                         "boxes) and reads pages and images without one by OCR; never: the text layer alone; "
                         "always: OCR every page, ignoring the layer. Each JSON line says its source")
    ap.add_argument("--overlay", action="store_true", help="also write an overlay PNG per page")
    ap.add_argument("--force", action="store_true", help="redo files whose outputs exist")
    ap.add_argument("--weights", default=None, help="model folder (default: document/weights/ocr-small)")
    ap.add_argument("--model", default=None, metavar="DIR",
                    help="a page-reading vision-language folder (GOT-OCR2, Qwen2-VL class, Florence-2 <OCR>; saved "
                         "with its processor) that reads each page whole instead of our line OCR")
    ap.add_argument("--regions", action="store_true",
                    help="--model: read the page's detected text regions (cropped) as one batch instead of the "
                         "whole page (region-parallel reading)")
    ap.add_argument("--max-new-tokens", type=int, default=None,
                    help="--model: tokens per page (per region with --regions) at most (default 1024)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1 is fastest on a busy machine)")
    add_dtype_argument(ap)
    add_batch_arguments(ap)
    return ap.parse_args(argv)


def build_job(args, root: Path, out: Path, files: list[Path]):
    from suite.runtime.jobs.items import BatchJob, Item

    def base_of(item) -> Path:
        return outputs_for(Path(item.payload["src"]), root, out)

    def done(item) -> bool:
        base = base_of(item)
        return base.with_name(base.name + ".json").exists() and not args.force

    items = [Item(str(src), {"src": str(src)}) for src in files]
    worker_args = {"weights": args.weights, "threads": args.threads, "decoder": args.decoder,
                   "detector": args.detector, "dpi": args.dpi, "options": args.options, "overlay": args.overlay,
                   "model": args.model, "max_new_tokens": args.max_new_tokens, "regions": args.regions,
                   "dtype": args.dtype, "ocr_mode": args.ocr}
    return BatchJob("document", items, DocumentWorker, worker_args, lambda item, c: write_outputs(base_of(item), c),
                    fields=("text", "json", "overlays", "pages", "lines", "check"), manifest=out / "manifest.jsonl",
                    is_done=done, echo_errors=False)


def check_block_flags(args) -> None:
    """--block-size and --threshold in their ranges (a user error, exit status 2, before any file)."""
    if args.block_size is not None and args.block_size < 1:
        raise ValueError(f"--block-size must be >= 1, got {args.block_size}")
    if args.threshold is not None and not 0 < args.threshold <= 1:
        raise ValueError(f"--threshold is a confidence in (0, 1], got {args.threshold}")


def main(argv=None) -> int:
    args = parse(argv)
    root, out = Path(args.input), Path(args.out)
    if not root.exists():
        print(f"error: {root} does not exist; give an image, a PDF or a folder", file=sys.stderr)
        return 2
    if args.regions and args.model is None:
        print(f"error: {REGIONS_NEED_MODEL}", file=sys.stderr)
        return 2
    import suite
    from suite.runtime.jobs.cli import engine_from_args
    from suite.runtime.jobs.run import run_batch
    if args.decoder not in suite.list_decoders("document"):     # an image or speech decoder too: before any file
        print(f"error: unknown decoder {args.decoder!r} for documents; choose one of: "
              f"{', '.join(suite.list_decoders('document'))}", file=sys.stderr)
        return 2
    args.options = {k: v for k, v in (("block_size", args.block_size), ("threshold", args.threshold),
                                      ("prefix_only", args.prefix_only)) if v is not None}
    files, others = find_inputs(root, out)
    try:
        check_block_flags(args)
        suite.make_decoder(args.decoder, **args.options)
        engine = engine_from_args(args, threads=args.threads)
        summary = run_batch(build_job(args, root, out, files), engine) if files else None
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted: finished files are kept; run again to resume", file=sys.stderr)
        return 130
    rows = [(str(p), "skipped", "-", "-", "-", "not an image or PDF (by its name)") for p in others]
    for o in summary.outcomes if summary else ():
        if o.status == "skipped":
            rows.append((o.item.key, "done", "-", "-", "-", "already read (use --force to redo)"))
        elif o.status == "error":
            rows.append((o.item.key, "FAILED", "-", "-", f"{o.seconds:.1f}", o.message))
        else:
            msg = "empty page(s): no text found" if o.result["lines"] == 0 else ""
            rows.append((o.item.key, "ok", str(o.result["pages"]), str(o.result["lines"]), f"{o.seconds:.1f}", msg))
    if not rows:
        print(f"no files found under {root}", file=sys.stderr)
        return 0
    print(summary_table(rows))
    checks = check_list(summary.outcomes) if summary else ""
    if checks:
        print(checks)
    if summary:
        from suite.registry import effective_options
        from suite.runtime.options import guarantee_note, quality_costs
        note = guarantee_note(args.decoder, quality_costs(Path(__file__).parent, "document"),
                              options=effective_options(args.decoder, "document", args.options))
        print(summary.line() + (f"; {note}" if note else ""), file=sys.stderr)
    return summary.exit_code if summary else 0


if __name__ == "__main__":
    sys.exit(main())
