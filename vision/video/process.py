"""Reading existing videos for batch processing (`python -m apps.process_video`): frames sampled
at a chosen rate and the audio track, through PyAV, and the temporal drafts that carry one frame's
reading to the next.

Consecutive frames of a video are alike, so the previous frame's output is a good draft of the
next: its text lines (matched by position) draft each line's OCR, its box answer drafts the
grounding answer. The drafts are verified by the reader's own model (the `ngram_prior` decoder),
so with greedy decoding the result equals frame-by-frame `ar` exactly; only the forward count
changes. This module holds the video side (what a frame is, which line drafts which); the readers
themselves are the document, grounding and speech pipelines, composed by apps/process_video.py.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

SAMPLE_RATE = 16_000          # the audio track is decoded to mono float32 at this rate (the ASR's)
MIN_SIDE = 8
VIDEO_SUFFIXES = {".mp4", ".m4v", ".mov", ".mkv", ".webm", ".avi", ".gif", ".mpg", ".mpeg", ".ts"}
LINE_MATCH_IOU = 0.5          # a line drafts from the previous frame's line it overlaps at least this much


@dataclass
class VideoInfo:
    """What a video file holds, read from its header (no frame decoded)."""
    path: str
    duration_s: float
    width: int
    height: int
    has_audio: bool


@dataclass
class Clip:
    """A video read whole (small clips, tests): sampled frames with their times, and its audio track."""
    info: VideoInfo
    frames: list[np.ndarray]              # (H, W, 3) uint8, one per sample
    times: list[float]                    # seconds, one per frame
    audio: np.ndarray | None = None       # (S,) float32 mono at SAMPLE_RATE; None: no audio track


def _open(path: str):
    import av
    if not os.path.isfile(path):
        raise ValueError(f"{path}: no such file; give a video file or a folder of them")
    if os.path.getsize(path) == 0:
        raise ValueError(f"{path} is empty (0 bytes); copy the video again")
    try:
        container = av.open(path)
    except (av.error.FFmpegError, UnicodeDecodeError) as e:
        raise ValueError(f"{path} is not a video FFmpeg can read ({e}); give an MP4, MOV, MKV, WebM, AVI "
                         "or GIF file, or re-encode it (e.g. `ffmpeg -i in -c:v libx264 out.mp4`)") from None
    if not container.streams.video:
        container.close()
        raise ValueError(f"{path} has no video stream (audio only, or cut before its first frame?); give a "
                         "video, or transcribe audio alone with `python -m speech.asr`")
    return container


def probe(path: str | os.PathLike) -> VideoInfo:
    """The header of a video file; a clear ValueError for a file that is not one, or frames too small."""
    path = str(path)
    with _open(path) as container:
        video = container.streams.video[0]
        w, h = video.codec_context.width, video.codec_context.height
        duration = container.duration / 1_000_000 if container.duration else 0.0     # av.time_base: microseconds
        info = VideoInfo(path, duration, w, h, bool(container.streams.audio))
    if w and h and min(w, h) < MIN_SIDE:
        raise ValueError(f"{path}: frames of {w}x{h} pixels are too small to read; give frames at least "
                         f"{MIN_SIDE} pixels on each side")
    return info


def iter_frames(path: str | os.PathLike, fps: float = 1.0, max_frames: int | None = None):
    """(time in seconds, (H, W, 3) uint8) for the frames of `path` sampled at `fps` (the first
    frame at or after each sample time, k / fps after the first; a video slower than `fps` gives
    all its frames), at most `max_frames`, decoded one at a time (a long video never sits in
    memory). Clear ValueErrors: not a video, a stream that cannot be decoded, zero frames."""
    import av
    path = str(path)
    if not fps > 0:
        raise ValueError(f"fps must be > 0 (frames sampled per second), got {fps}")
    count, first = 0, None
    with _open(path) as container:
        stream = container.streams.video[0]
        try:
            for k, frame in enumerate(container.decode(stream)):
                t = float(frame.time) if frame.time is not None else k / float(stream.average_rate or fps)
                first = t if first is None else first
                if t - first < count / fps - 1e-6:
                    continue
                yield t, frame.to_ndarray(format="rgb24")
                count += 1
                if max_frames is not None and count >= max_frames:
                    return
        except av.error.FFmpegError as e:
            if not count:
                raise ValueError(f"{path}: its video stream cannot be decoded ({e}); re-encode it "
                                 "(e.g. `ffmpeg -i in -c:v libx264 out.mp4`)") from None
    if not count:
        raise ValueError(f"{path} has a video stream with zero frames (cut short while recording or "
                         "exporting?); export the video again")


def read_audio_track(path: str | os.PathLike) -> np.ndarray | None:
    """The first audio stream of `path` as (S,) mono float32 at SAMPLE_RATE; None when the file
    has none (or it holds no samples). An undecodable track is a clear error."""
    import av
    path = str(path)
    with _open(path) as container:
        if not container.streams.audio:
            return None
        resampler = av.AudioResampler(format="flt", layout="mono", rate=SAMPLE_RATE)
        chunks = []
        try:
            for frame in container.decode(container.streams.audio[0]):
                chunks += [out.to_ndarray().reshape(-1) for out in resampler.resample(frame)]
            chunks += [out.to_ndarray().reshape(-1) for out in resampler.resample(None)]
        except av.error.FFmpegError as e:
            raise ValueError(f"{path}: its audio track cannot be decoded ({e}); re-encode it (e.g. "
                             "`ffmpeg -i in -c:a aac out.mp4`) or pass --asr off") from None
    samples = np.concatenate(chunks).astype(np.float32) if chunks else np.zeros(0, np.float32)
    return samples if samples.size else None


def read_clip(path: str | os.PathLike, fps: float = 1.0, max_frames: int | None = None, audio: bool = True) -> Clip:
    """A video read whole: `iter_frames` collected, and its audio track when `audio`."""
    info = probe(path)
    sampled = list(iter_frames(path, fps, max_frames))
    return Clip(info, [f for _, f in sampled], [t for t, _ in sampled], read_audio_track(path) if audio else None)


def frame_spans(times: list[float], duration_s: float) -> list[tuple[float, float]]:
    """(start, end) seconds each sampled frame stands for: until the next sample, the last until
    the end of the video (or one sample interval past it when the length is unknown)."""
    if not times:
        return []
    step = times[-1] - times[-2] if len(times) > 1 else 1.0
    ends = times[1:] + [max(duration_s, times[-1] + (0 if duration_s else step))]
    return list(zip(times, ends))


# ---- temporal drafts --------------------------------------------------------------------------

def iou(a, b) -> float:
    """Intersection over union of two (x0, y0, x1, y1) boxes."""
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ix * iy
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def match_lines(boxes, previous_boxes) -> list[int | None]:
    """For each line box, the index of the previous frame's line it overlaps most (IoU at least
    LINE_MATCH_IOU), else None."""
    out = []
    for box in boxes:
        scores = [iou(box, b) for b in previous_boxes]
        best = int(np.argmax(scores)) if scores else None
        out.append(best if best is not None and scores[best] >= LINE_MATCH_IOU else None)
    return out


def piece_priors(owner: list[int], boxes, previous: list[tuple[tuple, str, list[str]]] | None) -> list[str]:
    """The draft text of each piece of this frame's lines (a long line is read in pieces; `owner`
    names each piece's line): the matching piece of the previous frame's line at the same place
    (`match_lines`) when that line was cut into as many pieces, else that line's whole text; for
    a line with no match, the previous frame's whole text (the n-gram lookup finds a moved line
    inside it); "" on the first frame (plain AR). `previous`: (box, text, piece texts) per line."""
    if not previous:
        return [""] * len(owner)
    matches = match_lines(boxes, [box for box, _, _ in previous])
    whole = " ".join(text for _, text, _ in previous)
    counts = [owner.count(i) for i in range(len(boxes))]
    out, seen = [], [0] * len(boxes)
    for line in owner:
        m, j = matches[line], seen[line]
        seen[line] += 1
        if m is None:
            out.append(whole)
        else:
            _, text, pieces = previous[m]
            out.append(pieces[j] if len(pieces) == counts[line] else text)
    return out


def frame_text(lines) -> str:
    """The text of a frame: its lines' texts (the second field of each line), one per line."""
    return "\n".join(line[1] for line in lines if line[1])
