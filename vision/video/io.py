"""Video files through PyAV (FFmpeg): MP4 (H.264) and GIF, written whole (a temporary file
beside the target, renamed into place)."""
from __future__ import annotations

import os

import numpy as np

from suite.runtime.storage import atomic_path

FORMATS = {".mp4": ("libx264", "yuv420p"), ".gif": ("gif", "rgb8")}


def write_video(path: str | os.PathLike, frames, fps: float = 8.0, scale: int = 1) -> str:
    """Write PIL frames (or (T, H, W, 3) uint8) to `path` (.mp4: H.264, .gif); `scale` enlarges
    each frame by pixel repetition (64x64 frames are small to watch). Returns the path."""
    try:
        import av
    except ImportError as e:
        raise ValueError("writing video needs PyAV: pip install -r requirements/video.txt") from e
    suffix = os.path.splitext(str(path))[1].lower()
    if suffix not in FORMATS:
        raise ValueError(f"cannot write {path}: give a file name ending in {' or '.join(FORMATS)}")
    if len(frames) == 0:
        raise ValueError("no frames to write: generate at least one frame")
    pixels = [np.asarray(f.convert("RGB") if hasattr(f, "convert") else f, dtype=np.uint8) for f in frames]
    if scale > 1:
        pixels = [p.repeat(scale, 0).repeat(scale, 1) for p in pixels]
    codec, pix_fmt = FORMATS[suffix]
    with atomic_path(path) as tmp:
        with av.open(str(tmp), "w") as out:
            stream = out.add_stream(codec, rate=int(round(fps)))
            stream.height, stream.width = pixels[0].shape[:2]
            stream.pix_fmt = pix_fmt
            for p in pixels:
                out.mux(stream.encode(av.VideoFrame.from_ndarray(np.ascontiguousarray(p), format="rgb24")))
            out.mux(stream.encode())
    return str(path)


def read_video(path: str | os.PathLike) -> np.ndarray:
    """(T, H, W, 3) uint8 frames of a video file."""
    import av
    try:
        with av.open(str(path)) as f:
            frames = [fr.to_ndarray(format="rgb24") for fr in f.decode(video=0)]
    except (av.error.FFmpegError, IndexError) as e:
        raise ValueError(f"cannot read {path} as a video ({e}); give an MP4, GIF or another FFmpeg format") from e
    if not frames:
        raise ValueError(f"{path} has no video frames")
    return np.stack(frames)
