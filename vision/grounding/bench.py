"""Grounding benchmark: `python -m vision.bench grounding [--n 300] [--obb-n 150] [--batch 1]`.

Every decoder (ar, parallel_box, hybrid, locus) runs on the same held-out generated scenes and
queries, interleaved per batch in one process. Columns: Acc@0.5 (a query is right when every target
box is found at IoU >= 0.5 and nothing else is returned; "no match" queries are right when nothing
is returned), box F1@0.5, boxes per second (end to end: letterbox + MobileNetV2 + decoding; and the
decode loop alone), forwards per box (each query's own decoder forwards / boxes returned),
same-as-ar (identical output tokens), blocks re-decoded AR (hybrid; for locus, the boxes whose
parallel draft needed correcting). Oriented scenes: rotated IoU, for the learned angles and for
the axis-aligned envelope of the same predicted boxes. Real-image checks: faces found by
scikit-image's LBP cascade on real photos, and words located by rapidocr on a real scanned page,
against the model's "the face" / "the text" boxes.
`--model DIR` benches a transformers family's folder (Florence-2, PaliGemma, Kosmos-2: vision/hf_grounding.py)
instead: its exact decoders (ar, ngram, lookahead, jacobi, ...) on the same held-out scenes, greedy; columns
Acc@0.5, F1@0.5, forwards, tokens per forward, wall time, speedup over ar, same-as-ar.
"""
from __future__ import annotations

import sys
import time

import numpy as np

from suite.models.dtypes import add_dtype_argument
from suite.runtime.options import cli_parser
from suite.runtime.storage import write_json

DECODERS = ("ar", "parallel_box", "hybrid", "locus")


def parse_spec(spec: str) -> tuple[str, dict]:
    """'hybrid:confidence_floor=0.3' -> ('hybrid', {'confidence_floor': 0.3})."""
    name, _, rest = spec.partition(":")
    opts = {}
    for kv in filter(None, rest.split(",")):
        k, _, v = kv.partition("=")
        opts[k] = int(v) if v.lstrip("-").isdigit() else float(v)
    return name, opts


def run_decoders(pipe, items, decoders, task: str, batch: int, progress: bool = True):
    """{decoder spec: {"results": [GroundingResult], "stats": GroundingStats}} over (scene, query) items."""
    from tqdm import tqdm
    from .pipeline import GroundingStats
    out = {d: {"results": [], "stats": GroundingStats()} for d in decoders}
    chunks = [items[i:i + batch] for i in range(0, len(items), batch)]
    for chunk in tqdm(chunks, desc=f"bench {task}", disable=not progress, file=sys.stderr):
        for d in decoders:
            name, opts = parse_spec(d)
            res = pipe.batch([s.image for s, _ in chunk], [q.text for _, q in chunk], decoder=name, task=task,
                             score=False, **opts)
            out[d]["results"] += res
            out[d]["stats"].add(res[0].stats)
    return out


def tune_floor(pipe, n: int, batch: int, task: str = "aabb", floors=(0.0, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8)):
    """hybrid's confidence floor for a task, chosen on validation scenes (never trained on, not the
    held-out split): the lowest floor (fewest fallbacks) whose Acc@0.5 reaches ar's; else the most
    accurate."""
    from . import data
    items = data.validation(n, task)
    specs = ["ar"] + [f"hybrid:confidence_floor={f}" for f in floors]
    score = score_aabb if task == "aabb" else score_obb
    rows = score(items, run_decoders(pipe, items, specs, task, batch))
    ar_acc = rows[0]["acc"]
    ok = [(f, r) for f, r in zip(floors, rows[1:]) if r["acc"] >= ar_acc]
    best = ok[0][0] if ok else max(zip(floors, rows[1:]), key=lambda fr: fr[1]["acc"])[0]
    return best, rows


def score_aabb(items, runs):
    from .metrics import iou, match, query_correct
    rows = []
    ar_tokens = [r.tokens for r in runs["ar"]["results"]] if "ar" in runs else None
    for d, run in runs.items():
        correct, tp, n_pred, n_gt = 0, 0, 0, 0
        for (scene, q), r in zip(items, run["results"]):
            gt = [o.box for o in q.targets]
            correct += query_correct(r.boxes, gt, iou)
            tp += sum(v >= 0.5 for v in match(r.boxes, gt, iou))
            n_pred, n_gt = n_pred + len(r.boxes), n_gt + len(gt)
        rows.append(summary_row(d, run, correct / len(items), 2 * tp / max(n_pred + n_gt, 1), ar_tokens))
    return rows


def score_obb(items, runs):
    from .metrics import envelope, match, query_correct, rotated_iou
    rows = []
    ar_tokens = [r.tokens for r in runs["ar"]["results"]] if "ar" in runs else None
    for d, run in runs.items():
        acc, acc_env, ious, ious_env = 0, 0, [], []
        for (scene, q), r in zip(items, run["results"]):
            gt = [o.rbox for o in q.targets]
            pred = [(*b, a) for b, a in zip(r.boxes, r.angles)]
            env = [envelope(p) for p in pred]
            acc += query_correct(pred, gt, rotated_iou)
            acc_env += query_correct(env, gt, rotated_iou)
            ious += match(pred, gt, rotated_iou)
            ious_env += match(env, gt, rotated_iou)
        row = summary_row(d, run, acc / len(items), None, ar_tokens)
        row.update(acc_envelope=acc_env / len(items), mean_riou=float(np.mean(ious)), mean_riou_envelope=float(np.mean(ious_env)))
        rows.append(row)
    return rows


def bench_family(pipe, items, decoders, batch: int) -> list[dict]:
    """A transformers family's decoders (vision/hf_grounding.py) interleaved per batch on the same
    (scene, query) items, scored as score_aabb scores ours."""
    from tqdm import tqdm

    from .metrics import iou, match, query_correct
    from .pipeline import load_image            # the scenes are arrays; the families take PIL images
    runs = {d: {"results": [], "forwards": 0, "tokens": 0, "wall": 0.0} for d in decoders}
    for chunk in tqdm([items[i:i + batch] for i in range(0, len(items), batch)], desc="bench family", file=sys.stderr):
        for d in decoders:
            name, opts = parse_spec(d)
            res = pipe([load_image(s.image) for s, _ in chunk], [q.text for _, q in chunk], decoder=name, **opts)
            run = runs[d]
            run["results"] += res
            run["forwards"] += res[0].stats.num_forwards
            run["tokens"] += res[0].stats.num_new_tokens
            run["wall"] += res[0].wall_time_s
    ar = runs.get("ar")
    rows = []
    for d, run in runs.items():
        correct = tp = n_pred = n_gt = 0
        for (scene, q), r in zip(items, run["results"]):
            gt = [o.box for o in q.targets]
            correct += query_correct(r.boxes, gt, iou)
            tp += sum(v >= 0.5 for v in match(r.boxes, gt, iou))
            n_pred, n_gt = n_pred + len(r.boxes), n_gt + len(gt)
        rows.append({"decoder": d, "acc": correct / len(items), "f1": 2 * tp / max(n_pred + n_gt, 1),
                     "forwards": run["forwards"], "tokens_per_forward": run["tokens"] / max(run["forwards"], 1),
                     "wall_s": run["wall"], "speedup_vs_ar": ar["wall"] / max(run["wall"], 1e-9) if ar else None,
                     "same_as_ar": float(np.mean([r.tokens == a.tokens for r, a in zip(run["results"], ar["results"])]))
                     if ar else None})
    return rows


def summary_row(d, run, acc, f1, ar_tokens):
    s = run["stats"]
    same = None if ar_tokens is None else float(np.mean([r.tokens == t for r, t in zip(run["results"], ar_tokens)]))
    return {"decoder": d, "acc": acc, "f1": f1, "boxes_per_s": s.boxes_per_second,
            "decode_boxes_per_s": s.decode_boxes_per_second, "forwards_per_box": s.forwards_per_box,
            "same_as_ar": same, "blocks": s.blocks, "fallbacks": s.fallbacks, "boxes": s.num_boxes,
            "queries": s.num_queries}


def fmt(v, pct=False):
    if v is None:
        return "-"
    return f"{100 * v:.1f}" if pct else f"{v:.2f}"


def table(rows, oriented: bool = False) -> str:
    base = rows[0]
    head = ["decoder", "Acc@0.5 %"] + (["Acc@0.5 envelope %", "mean rIoU", "mean rIoU envelope"] if oriented else ["box F1@0.5 %"])
    head += ["boxes/s (end to end)", "boxes/s (decode)", "decode speedup vs ar", "forwards/box", "forwards vs ar",
             "same as ar %", "blocks re-decoded AR"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["decoder"], fmt(r["acc"], True)]
        cells += ([fmt(r["acc_envelope"], True), fmt(r["mean_riou"]), fmt(r["mean_riou_envelope"])] if oriented
                  else [fmt(r["f1"], True)])
        cells += [f"{r['boxes_per_s']:.1f}", f"{r['decode_boxes_per_s']:.1f}",
                  f"{r['decode_boxes_per_s'] / max(base['decode_boxes_per_s'], 1e-9):.2f}x",
                  f"{r['forwards_per_box']:.2f}", f"{base['forwards_per_box'] / max(r['forwards_per_box'], 1e-9):.2f}x fewer",
                  fmt(r["same_as_ar"], True), f"{r['fallbacks']}/{r['blocks']}" if r["blocks"] else "-"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


# ---------------------------------------------------------------- real images

def real_faces(pipe, decoders):
    """Real photos (scikit-image, matplotlib samples): the LBP cascade's faces vs "the face"."""
    from skimage import data
    from skimage.feature import Cascade
    from .metrics import iou, match
    cascade = Cascade(data.lbp_frontal_face_cascade_filename())
    photos = {"astronaut": data.astronaut()}
    try:
        import matplotlib.cbook as cbook
        with cbook.get_sample_data("grace_hopper.jpg") as f:
            from PIL import Image
            photos["grace_hopper"] = np.asarray(Image.open(f).convert("RGB"))
    except Exception:
        pass
    rows = []
    for photo, img in photos.items():
        dets = cascade.detect_multi_scale(img=img, scale_factor=1.2, step_ratio=1, min_size=(60, 60), max_size=(400, 400))
        gt = [(d["c"], d["r"], d["c"] + d["width"], d["r"] + d["height"]) for d in dets]
        for d in decoders:
            name, opts = parse_spec(d)
            r = pipe(img, "the face", decoder=name, score=False, **opts)
            ious = match(r.boxes, gt, iou)
            rows.append({"image": photo, "decoder": d, "cascade_faces": len(gt), "boxes": len(r.boxes),
                         "mean_iou": float(np.mean(ious)) if ious else None})
    return rows


def real_text(pipe, decoders, max_crops: int = 16):
    """A real scanned page (scikit-image page.png): square crops around words rapidocr located
    (word boxes), "the text" boxes vs rapidocr's word boxes inside each crop (precision and
    recall at IoU 0.5; the model returns at most 4 boxes per query)."""
    from pathlib import Path
    import skimage
    from PIL import Image
    from rapidocr import RapidOCR
    from .metrics import iou, match
    path = Path(skimage.__file__).parent / "data" / "page.png"
    img = Image.open(path).convert("RGB")
    ocr = RapidOCR()(np.asarray(img), return_word_box=True)
    words = [w for line in (ocr.word_results or ()) for w in line]
    boxes = [(float(min(p[0] for p in b)), float(min(p[1] for p in b)), float(max(p[0] for p in b)),
              float(max(p[1] for p in b))) for _, _, b in words]
    crops = []
    for b in boxes[::max(1, len(boxes) // max_crops)][:max_crops]:
        side = min(img.width, img.height, max(b[2] - b[0], (b[3] - b[1]) * 4) * 1.6)
        cx, cy = (b[0] + b[2]) / 2, (b[1] + b[3]) / 2
        x0 = int(min(max(cx - side / 2, 0), img.width - side))
        y0 = int(min(max(cy - side / 2, 0), img.height - side))
        x1, y1 = int(x0 + side), int(y0 + side)
        inside = [(bx0 - x0, by0 - y0, bx1 - x0, by1 - y0) for bx0, by0, bx1, by1 in boxes
                  if bx0 >= x0 and by0 >= y0 and bx1 <= x1 and by1 <= y1]
        crops.append((img.crop((x0, y0, x1, y1)), inside))
    rows = []
    for d in decoders:
        hits, total, found = 0, 0, 0
        for crop, gt in crops:
            name, opts = parse_spec(d)
            r = pipe(crop, "the text", decoder=name, score=False, **opts)
            hits += sum(v >= 0.5 for v in match(r.boxes, gt, iou))
            total += len(gt)
            found += len(r.boxes)
        rows.append({"image": path.name, "decoder": d, "crops": len(crops), "rapidocr_words": total,
                     "boxes": found, "precision@0.5": hits / max(found, 1), "recall@0.5": hits / max(total, 1)})
    return rows


def main(argv=None) -> int:
    ap = cli_parser("python -m vision.bench grounding", __doc__, "python -m vision.bench grounding --n 300 --obb-n 150 --threads 1")
    ap.add_argument("--n", type=int, default=300, help="held-out axis-aligned queries")
    ap.add_argument("--obb-n", type=int, default=150, help="held-out oriented queries (0: skip)")
    ap.add_argument("--batch", type=int, default=1, help="queries decoded together (1: one query at a time)")
    ap.add_argument("--decoders", nargs="+", default=None,
                    help=f"default: {' '.join(DECODERS)}; a family's (--model): its exact decoders but speculative")
    ap.add_argument("--no-real", action="store_true", help="skip the real-image checks")
    ap.add_argument("--tune", type=int, default=0, metavar="N",
                    help="first choose hybrid's confidence floor on N validation queries per task "
                         "(not the held-out ones)")
    ap.add_argument("--model", "--weights", dest="weights", default=None, metavar="DIR",
                    help="model folder: ours (default vision/weights/grounding) or a transformers family's "
                         "(Florence-2, PaliGemma, Kosmos-2)")
    ap.add_argument("--threads", type=int, default=1)
    add_dtype_argument(ap)
    ap.add_argument("--json", default=None, help="also write the numbers here (atomically)")
    args = ap.parse_args(argv)
    if args.n < 1 or args.batch < 1 or args.obb_n < 0:
        print("error: --n and --batch must be positive, --obb-n >= 0", file=sys.stderr)
        return 2
    from . import data
    from .pipeline import load_grounding_pipeline
    try:
        pipe = load_grounding_pipeline(args.weights, threads=args.threads, dtype=args.dtype)
        family = getattr(pipe, "vlm", None) is not None           # a transformers family (hf_grounding.py)
        if args.decoders is None:
            args.decoders = [d for d in pipe.decoders if d != "speculative"] if family else list(DECODERS)
        for d in args.decoders:
            pipe.decoder_for(*parse_spec(d))
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if family:
        return main_family(pipe, args)
    decoders = ["ar"] + [d for d in args.decoders if d != "ar"]
    t0 = time.time()
    report = {"settings": {"n": args.n, "obb_n": args.obb_n, "batch": args.batch, "threads": args.threads}}
    floors = {}
    if args.tune:
        for task, n in (("aabb", args.tune), ("obb", args.tune if args.obb_n else 0)):
            if not n:
                continue
            floors[task], sweep = tune_floor(pipe, n, args.batch, task)
            print(f"### hybrid confidence floor, {task}, on {n} validation queries (chosen: {floors[task]})\n")
            print(table(sweep, oriented=task == "obb") + "\n")
        report["tuned_floors"] = floors

    def specs(task):
        return [f"hybrid:confidence_floor={floors[task]}" if d == "hybrid" and task in floors else d for d in decoders]

    items = data.heldout(args.n, "aabb")
    rows = score_aabb(items, run_decoders(pipe, items, specs("aabb"), "aabb", args.batch))
    report["aabb"] = rows
    print(f"### held-out generated scenes, axis-aligned ({args.n} queries, "
          f"{sum(len(q.targets) for _, q in items)} target boxes, {sum(not q.targets for _, q in items)} no-match; "
          f"batch {args.batch}, {args.threads} thread(s))\n")
    print(table(rows))
    if args.obb_n:
        oitems = data.heldout(args.obb_n, "obb")
        orows = score_obb(oitems, run_decoders(pipe, oitems, specs("obb"), "obb", args.batch))
        report["obb"] = orows
        print(f"\n### held-out generated scenes, oriented ({args.obb_n} queries; rotated IoU; envelope = the "
              "axis-aligned envelope of the same predicted box)\n")
        print(table(orows, oriented=True))
    if not args.no_real:
        faces = real_faces(pipe, specs("aabb"))
        report["real_faces"] = faces
        print("\n### real photos: LBP face cascade vs \"the face\"\n")
        print("| image | decoder | cascade faces | boxes returned | mean IoU with cascade |\n|---|---|---|---|---|")
        for r in faces:
            print(f"| {r['image']} | {r['decoder']} | {r['cascade_faces']} | {r['boxes']} | {fmt(r['mean_iou'])} |")
        text = real_text(pipe, specs("aabb"))
        report["real_text"] = text
        print("\n### real scan: rapidocr word boxes vs \"the text\" (square crops around rapidocr words)\n")
        print("| image | decoder | crops | rapidocr words in crops | boxes returned | precision@0.5 % | recall@0.5 % |\n"
              "|---|---|---|---|---|---|---|")
        for r in text:
            print(f"| {r['image']} | {r['decoder']} | {r['crops']} | {r['rapidocr_words']} | {r['boxes']} | "
                  f"{fmt(r['precision@0.5'], True)} | {fmt(r['recall@0.5'], True)} |")
    print(f"\n(bench took {time.time() - t0:.0f} s)")
    if args.json:
        write_json(args.json, report, indent=1)
    return 0


def main_family(pipe, args) -> int:
    """`--model DIR`: a transformers family's rows on the held-out axis-aligned scenes."""
    from . import data
    decoders = ["ar"] + [d for d in args.decoders if d != "ar"]
    items = data.heldout(args.n, "aabb")
    rows = bench_family(pipe, items, decoders, args.batch)
    print(f"### {pipe.family} from {args.weights}: held-out generated scenes, axis-aligned ({args.n} queries; "
          f"batch {args.batch}, {args.threads} thread(s), greedy)\n")
    cols = ["decoder", "acc", "f1", "forwards", "tokens_per_forward", "wall_s", "speedup_vs_ar", "same_as_ar"]
    print("| " + " | ".join(cols) + " |\n|" + "---|" * len(cols))
    for r in rows:
        print("| " + " | ".join(str(r[c]) if not isinstance(r[c], float) else f"{r[c]:.3f}" for c in cols) + " |")
    if args.json:
        write_json(args.json, {"family": pipe.family, "model": str(args.weights), "aabb": rows}, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
