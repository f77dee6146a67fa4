"""Batch video processing: on-screen text, a grounded phrase and the speech of each video, to JSON and SRT.

    python -m apps.process_video talks/ --out processed/
    python -m apps.process_video clip.mp4 --out processed/ --phrase "the red circle" --fps 2
    python -m apps.process_video clip.mp4 --out processed/ --compare-ar     # also frame-by-frame ar: forwards, identical?
    python -m apps.process_video clips/ --out processed/ --drafts none      # frame-by-frame ar only (the baseline)
    python -m apps.process_video clips/ --out processed/ --engine ray --workers 2

Each video (a file, or every video of a folder, searched recursively) is read with PyAV: frames
sampled at --fps and its audio track. Every frame's text lines go through the document reader;
with --drafts temporal (the default) each line is drafted from the previous frame's reading of the
line at the same place (`ngram_prior`, verified by the OCR model, so the text equals frame-by-frame
`ar` exactly and only the forward count drops). --phrase grounds a referring expression in every
frame, the last frame's box answer drafting the next (verified the same way). The audio track is
cut at pauses and each voiced stretch transcribed by the ASR (--asr auto: when there is a track).

Outputs per video FILE: OUT/FILE.srt (subtitles: the speech, or the on-screen text when there is no
speech; --subtitles picks) and OUT/FILE.json (per frame: time, lines with boxes and text, forwards,
boxes; the speech segments; decoders, forward totals, notes), each written whole, the JSON last;
OUT/manifest.jsonl has one row per video (ok / error with the message). A rerun skips videos done
with the same settings (resumable; --force redoes them); a bad video is an error row and the batch
goes on. Exit status: 0 all done, 1 some videos failed, 2 bad arguments.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from vision.video.process import (SAMPLE_RATE, VIDEO_SUFFIXES, frame_spans, frame_text, iter_frames, piece_priors, probe,
                                  read_audio_track)
from vision.video.subtitles import Cue, screen_cues, to_srt, voiced_segments

DRAFTS = ("temporal", "none")
ASR_MODES = ("auto", "on", "off")
SUBTITLES = ("auto", "speech", "screen")


# ---- the readers, frame after frame ------------------------------------------------------------

def detect_lines(frame, detector: str) -> list[tuple[tuple, object]]:
    """A frame's (box, line image) crops, top to bottom (document.reader.line_crops)."""
    from PIL import Image

    from document.reader import line_crops
    return [(tuple(int(v) for v in box), crop) for box, crop in line_crops(Image.fromarray(frame), detector)
            if min(crop.size) >= 2]


def reading_pieces(ocr, images):
    """The pieces the OCR cuts long lines into (`OCR.pieces`: images, owner line, word spaces), so each
    piece drafts from its own predecessor; the lines themselves if a piece would be cut again."""
    from document.ocr import Pieces
    cut = ocr.pieces(images)
    if ocr.pieces(cut.images).owner != list(range(len(cut.images))):
        return Pieces.whole(images)
    return cut


class TextReader:
    """A video's on-screen text, one frame per call: its lines (box, text) and the OCR's forwards
    (batched, and summed over lines). temporal: each line piece is drafted from the previous
    frame's reading (`piece_priors`) and verified (`ngram_prior`); else every frame is read
    alone with `ar`, as document.read does."""

    def __init__(self, ocr, temporal: bool, num_draft: int):
        import suite
        self.ocr, self.temporal = ocr, temporal
        self.decoder = suite.make_decoder("ngram_prior", num_draft=num_draft) if temporal else "ar"
        self.previous: list | None = None          # (box, text, piece texts) per line of the last frame

    def __call__(self, crops) -> dict:
        boxes, images = [box for box, _ in crops], [crop for _, crop in crops]
        if not crops:
            self.previous = []
            return {"lines": [], "forwards": 0, "line_forwards": 0}
        if self.temporal:
            from document.ocr import join_pieces
            cut = reading_pieces(self.ocr, images)
            res = self.ocr(cut.images, decoder=self.decoder, prior_texts=piece_priors(cut.owner, boxes, self.previous))
            joined = join_pieces(res, cut.owner, cut.spaced, len(boxes)).texts
            parts = [[t for t, o in zip(res.texts, cut.owner) if o == i] for i in range(len(boxes))]
            lines = [(box, text, p) for box, text, p in zip(boxes, joined, parts)]
        else:
            res = self.ocr(images, decoder=self.decoder)
            lines = [(box, text, [text]) for box, text in zip(boxes, res.texts)]
        self.previous = [line for line in lines if line[1]]
        return {"lines": [(box, text) for box, text, _ in self.previous], "forwards": res.stats.num_forwards,
                "line_forwards": res.stats.row_forwards}


class BoxReader:
    """A phrase grounded in a video, one frame per call: its boxes (pixels) and the forwards.
    temporal: the previous frame's answer tokens draft this frame's (`ngram_prior`, verified)."""

    def __init__(self, grd, phrase: str, temporal: bool, num_draft: int):
        import suite
        self.grd, self.phrase, self.temporal = grd, phrase, temporal
        self.decoder = suite.make_decoder("ngram_prior", num_draft=num_draft) if temporal else "ar"
        self.previous: list[int] = []

    def __call__(self, frame) -> dict:
        res = self.grd.batch([frame], [self.phrase], decoder=self.decoder, score=False,
                             prior_tokens=[self.previous] if self.temporal else None)[0]
        self.previous = list(res.tokens)
        return {"boxes": [[round(float(v), 1) for v in b] for b in res.boxes], "no_match": res.no_match,
                "forwards": res.stats.num_forwards}


def transcribe(asr, audio, decoder: str | None) -> tuple[list[dict], list[str]]:
    """Speech segments {start, end, text, forwards} of the audio track, one ASR call per voiced
    stretch; a stretch the ASR refuses (too short, clipped) is a note, not a failure."""
    segments, notes = [], []
    for start, end in voiced_segments(audio, SAMPLE_RATE):
        piece = audio[int(start * SAMPLE_RATE):int(end * SAMPLE_RATE)]
        try:
            res = asr(piece, SAMPLE_RATE, **({"decoder": decoder} if decoder else {}))
        except ValueError as e:
            notes.append(f"speech {start:.2f}-{end:.2f} s not transcribed: {e}")
            continue
        if res.text.strip():
            segments.append({"start": round(start, 3), "end": round(end, 3), "text": res.text.strip(),
                             "forwards": res.stats.num_forwards})
    return segments, notes


# ---- one video --------------------------------------------------------------------------------

def _summary(rows: list[dict], decoder: str, keys: tuple[str, ...]) -> dict:
    out = {"decoder": decoder, **{k: sum(r[k] for r in rows) for k in keys}}
    out["forwards_per_frame"] = round(out["forwards"] / max(len(rows), 1), 3)
    return out


def _versus_ar(summary: dict, rows: list[dict], ar_rows: list[dict], keys: tuple[str, ...], output: str) -> dict:
    """The frame-by-frame `ar` baseline beside a temporal run: its forward counts (`keys`), the
    ratios, and whether every frame's `output` is identical."""
    ar = {k: sum(r[k] for r in ar_rows) for k in keys}
    ar["identical"] = all(r[output] == a[output] for r, a in zip(rows, ar_rows))
    for k in keys:
        ar[f"{k}_ratio"] = round(ar[k] / max(summary[k], 1), 3)
    return ar


class VideoWorker:
    """The batch worker (suite.runtime.jobs): loads the readers once, processes one video per call into
    the texts of its SRT and JSON. Frames are decoded and read one at a time."""

    def __init__(self, fps=1.0, max_frames=None, ocr=True, detector="auto", drafts="temporal", phrase=None,
                 asr="auto", asr_decoder=None, subtitles="auto", num_draft=32, compare_ar=False,
                 ocr_weights=None, grounding_weights=None, asr_model=None, threads=None):
        self.opts = argparse.Namespace(fps=fps, max_frames=max_frames, detector=detector, drafts=drafts,
                                       phrase=phrase, asr=asr, asr_decoder=asr_decoder, subtitles=subtitles,
                                       num_draft=num_draft, compare_ar=compare_ar)
        self.ocr = self.grd = self.asr = None
        if ocr:
            from document.ocr import load_ocr
            self.ocr = load_ocr(ocr_weights, threads=threads)
        if phrase:
            from vision.grounding.pipeline import load_grounding_pipeline
            self.grd = load_grounding_pipeline(grounding_weights, threads=threads)
            self.grd.check(phrase, "aabb")              # a bad phrase fails before the first video
        if asr != "off":
            from speech.asr import load_asr
            self.asr = load_asr(asr_model)

    def readers(self, temporal: bool) -> tuple[TextReader | None, BoxReader | None]:
        o = self.opts
        return (TextReader(self.ocr, temporal, o.num_draft) if self.ocr is not None else None,
                BoxReader(self.grd, o.phrase, temporal, o.num_draft) if self.grd is not None else None)

    def __call__(self, payload: dict) -> dict:
        o, src = self.opts, payload["src"]
        info = probe(src)
        if o.asr == "on" and not info.has_audio:
            raise ValueError(f"{src} has no audio track and --asr on asks for its speech; pass --asr auto "
                             "(transcribe when there is a track) or --asr off")
        temporal = o.drafts == "temporal"
        report = {"source": src, "duration_s": round(info.duration_s, 3), "size": [info.width, info.height],
                  "fps": o.fps, "drafts": o.drafts, "notes": [], "seconds": {}}
        frames = self._frames(src, temporal, report)
        spans = frame_spans([f["time_s"] for f in frames], info.duration_s)
        speech = self._speech(src, report) if self.asr is not None and info.has_audio else []
        if o.asr != "off" and not info.has_audio:
            report["notes"].append("no audio track: no speech subtitles (the video is silent)")
        if o.subtitles == "speech" or (o.subtitles == "auto" and speech):
            cues, report["subtitles"] = speech, "speech"
        else:
            cues, report["subtitles"] = screen_cues(spans, [f.get("text", "") for f in frames]), "screen"
        report["frames"] = frames
        return {"json": json.dumps(report, indent=1, ensure_ascii=False), "srt": to_srt(cues), "frames": len(frames),
                "cues": len(cues), "ocr": report.get("ocr"), "grounding": report.get("grounding")}

    def _frames(self, src, temporal: bool, report: dict):
        """Every sampled frame through the readers (and, with --compare-ar, through ar ones too)."""
        o = self.opts
        text, boxes = self.readers(temporal)
        text_ar, boxes_ar = self.readers(False) if o.compare_ar and temporal else (None, None)
        rows = {"text": [], "text_ar": [], "boxes": [], "boxes_ar": []}
        seconds = dict.fromkeys(("decode", "detect", "ocr", "ocr_ar", "grounding", "grounding_ar"), 0.0)
        frames, clock = [], time.perf_counter()
        for k, (t, image) in enumerate(iter_frames(src, o.fps, o.max_frames)):
            seconds["decode"] += time.perf_counter() - clock
            frame = {"index": k, "time_s": round(t, 3)}
            if text is not None:
                crops = _timed(seconds, "detect", detect_lines, image, o.detector)
                row = _timed(seconds, "ocr", text, crops)
                rows["text"].append(row)
                if text_ar is not None:
                    rows["text_ar"].append(_timed(seconds, "ocr_ar", text_ar, crops))
                frame.update(text=frame_text(row["lines"]), ocr_forwards=row["forwards"],
                             lines=[{"box": list(b), "text": s} for b, s in row["lines"]])
            if boxes is not None:
                row = _timed(seconds, "grounding", boxes, image)
                rows["boxes"].append(row)
                if boxes_ar is not None:
                    rows["boxes_ar"].append(_timed(seconds, "grounding_ar", boxes_ar, image))
                frame.update(boxes=row["boxes"], no_match=row["no_match"], box_forwards=row["forwards"])
            frames.append(frame)
            clock = time.perf_counter()
        decoder = "ngram_prior" if temporal else "ar"
        if text is not None:
            report["ocr"] = _summary(rows["text"], decoder, ("forwards", "line_forwards"))
            if text_ar is not None:
                report["ocr"]["ar"] = _versus_ar(report["ocr"], rows["text"], rows["text_ar"],
                                                 ("forwards", "line_forwards"), "lines")
        if boxes is not None:
            report["grounding"] = {"phrase": o.phrase, **_summary(rows["boxes"], decoder, ("forwards",))}
            if boxes_ar is not None:
                report["grounding"]["ar"] = _versus_ar(report["grounding"], rows["boxes"], rows["boxes_ar"],
                                                       ("forwards",), "boxes")
        report["seconds"].update({k: round(v, 3) for k, v in seconds.items() if v})
        return frames

    def _speech(self, src, report) -> list[Cue]:
        t0 = time.perf_counter()
        audio = read_audio_track(src)
        decoder = self.opts.asr_decoder or getattr(self.asr, "default_decoder", "ctc_speculative")   # the one reported
        segments, notes = transcribe(self.asr, audio, decoder) if audio is not None else ([], [])
        report["seconds"]["asr"] = round(time.perf_counter() - t0, 3)
        report["speech"] = {"decoder": decoder, "segments": segments,
                            "forwards": sum(s["forwards"] for s in segments)}
        report["notes"] += notes
        if not segments:
            report["notes"].append("the audio track holds no speech the ASR could transcribe")
        return [Cue(s["start"], s["end"], s["text"]) for s in segments]


def _timed(seconds: dict, key: str, fn, *args):
    t0 = time.perf_counter()
    out = fn(*args)
    seconds[key] += time.perf_counter() - t0
    return out


# ---- the batch --------------------------------------------------------------------------------

def find_videos(paths: list[Path], out: Path) -> list[tuple[Path, Path]]:
    """(video, output base) pairs: files as given, folders searched for video suffixes (the output
    folder never); two inputs with one output name are a clear error."""
    pairs = []
    for root in paths:
        if not root.exists():
            raise ValueError(f"{root} does not exist; give video files or folders of them")
        if root.is_file():
            pairs.append((root, out / root.name))
            continue
        found = sorted(p for p in root.rglob("*") if p.is_file() and p.suffix.lower() in VIDEO_SUFFIXES
                       and out.resolve() not in p.resolve().parents)
        pairs += [(p, out / p.relative_to(root)) for p in found]
    seen: dict[Path, Path] = {}
    for src, base in pairs:
        if base in seen:
            raise ValueError(f"{seen[base]} and {src} would both write {base}.json; process them into "
                             "different --out folders")
        seen[base] = src
    return pairs


def outputs_of(base: Path) -> tuple[Path, Path]:
    return base.with_name(base.name + ".srt"), base.with_name(base.name + ".json")


def write_outputs(item, result: dict) -> None:
    """The SRT, then the JSON (it marks the video done); if the JSON fails, the SRT goes too."""
    from suite.runtime.storage import write_text
    srt, js = item.outputs
    srt.parent.mkdir(parents=True, exist_ok=True)
    write_text(srt, result["srt"])
    try:
        write_text(js, result["json"] + "\n")
    except BaseException:
        srt.unlink(missing_ok=True)
        raise
    print(result_line(item.key, result), flush=True)


def result_line(key: str, result: dict) -> str:
    parts = [key, f"{result['frames']} frames", f"{result['cues']} cues"]
    for name in ("ocr", "grounding"):
        s = result.get(name)
        if s:
            versus = s.get("ar")
            parts.append(f"{name} {s['forwards']} forwards ({s['decoder']})" + (
                f" vs {versus['forwards']} ar: {versus['forwards_ratio']:.2f}x fewer, "
                f"{'identical' if versus['identical'] else 'DIFFERENT'}" if versus else ""))
    return "\t".join(parts)


def parse(argv):
    from suite.runtime.jobs.cli import add_batch_arguments
    ap = argparse.ArgumentParser(prog="python -m apps.process_video", description=__doc__.split("\n\n")[0],
                                 epilog="examples:\n" + __doc__.split("\n\n")[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("inputs", nargs="+", help="video files, or folders searched recursively for videos")
    ap.add_argument("--out", required=True, help="output folder")
    ap.add_argument("--fps", type=float, default=1.0, help="frames read per second of video (default 1)")
    ap.add_argument("--max-frames", type=int, default=None, help="read at most this many frames per video")
    ap.add_argument("--drafts", choices=DRAFTS, default="temporal",
                    help="temporal: the previous frame's output drafts the next, verified (exact); "
                         "none: every frame read alone with ar (default temporal)")
    ap.add_argument("--num-draft", type=int, default=32, help="tokens drafted per forward (default 32)")
    ap.add_argument("--no-ocr", action="store_true", help="skip the on-screen text")
    ap.add_argument("--detector", default="auto", choices=["auto", "rapidocr", "projection"],
                    help="text line finder (document.reader; auto: rapidocr when installed)")
    ap.add_argument("--phrase", default=None, help="a referring expression to ground in every frame, "
                                                   "e.g. 'the red circle'")
    ap.add_argument("--asr", choices=ASR_MODES, default="auto",
                    help="auto: transcribe the audio track when there is one; on: a video without one is "
                         "an error; off: no speech")
    ap.add_argument("--asr-decoder", default=None, help="the ASR's decoder (default: the recogniser's own)")
    ap.add_argument("--subtitles", choices=SUBTITLES, default="auto",
                    help="what the SRT holds: auto (the speech, else the on-screen text), speech, screen")
    ap.add_argument("--compare-ar", action="store_true",
                    help="also read every frame alone with ar: forward ratios and identical output in the JSON")
    ap.add_argument("--force", action="store_true", help="redo videos already done")
    ap.add_argument("--ocr-weights", default=None, help="OCR model folder (default: document/weights/ocr-small)")
    ap.add_argument("--grounding-weights", default=None, help="grounding model folder (default: vision/weights/grounding)")
    ap.add_argument("--asr-model", default=None, help="ASR folder (default: the embedded recogniser; or a Whisper folder)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    add_batch_arguments(ap)
    return ap.parse_args(argv)


def build_job(args, pairs: list[tuple[Path, Path]]):
    from suite.runtime.jobs.items import BatchJob, Item
    items = [Item(str(src), {"src": str(src)}, outputs_of(base)) for src, base in pairs]
    worker_args = {"fps": args.fps, "max_frames": args.max_frames, "ocr": not args.no_ocr, "detector": args.detector,
                   "drafts": args.drafts, "phrase": args.phrase, "asr": args.asr, "asr_decoder": args.asr_decoder,
                   "subtitles": args.subtitles, "num_draft": args.num_draft, "compare_ar": args.compare_ar,
                   "ocr_weights": args.ocr_weights, "grounding_weights": args.grounding_weights,
                   "asr_model": args.asr_model, "threads": args.threads}
    return BatchJob("video", items, VideoWorker, worker_args, write_outputs,
                    fields=("json", "srt", "frames", "cues"), manifest=Path(args.out) / "manifest.jsonl",
                    is_done=(lambda item: False) if args.force else None, unit="video")


def check_args(args) -> None:
    if args.fps <= 0:
        raise ValueError(f"--fps must be > 0, got {args.fps}")
    if args.max_frames is not None and args.max_frames < 1:
        raise ValueError(f"--max-frames must be >= 1, got {args.max_frames}")
    if args.num_draft < 1:
        raise ValueError(f"--num-draft must be >= 1, got {args.num_draft}")
    if args.phrase is not None and not args.phrase.strip():
        raise ValueError("--phrase is empty: say what to find in every frame, e.g. --phrase \"the red circle\"")
    if args.no_ocr and not args.phrase and args.asr == "off":
        raise ValueError("nothing to do: --no-ocr and --asr off without --phrase; drop one of them")
    if args.subtitles == "speech" and args.asr == "off":
        raise ValueError("--subtitles speech needs the ASR; drop --asr off")
    if args.subtitles == "screen" and args.no_ocr:
        raise ValueError("--subtitles screen needs the on-screen text; drop --no-ocr")
    if args.asr_decoder:
        from speech.asr import DECODERS
        from speech.hf_asr import DECODERS as WHISPER_DECODERS
        if args.asr_decoder not in DECODERS + WHISPER_DECODERS:
            raise ValueError(f"unknown --asr-decoder {args.asr_decoder!r}; choose one of: "
                             f"{', '.join(dict.fromkeys(DECODERS + WHISPER_DECODERS))}")
    if args.compare_ar and args.drafts == "none":
        raise ValueError("--compare-ar compares temporal drafts with ar; drop --drafts none")


def main(argv=None) -> int:
    from suite.runtime.jobs.cli import engine_from_args, run_cli
    args = parse(argv)
    try:
        check_args(args)
        pairs = find_videos([Path(p) for p in args.inputs], Path(args.out))
        if not pairs:
            raise ValueError(f"no videos ({', '.join(sorted(VIDEO_SUFFIXES))}) under {', '.join(args.inputs)}")
        engine = engine_from_args(args, threads=args.threads)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return run_cli(build_job(args, pairs), engine)


if __name__ == "__main__":
    sys.exit(main())
