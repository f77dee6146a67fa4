"""3-D next-set decoding of video codes over (t, h, w): ZipAR rows inside each frame (He et al.
2024, "ZipAR: Parallel Autoregressive Image Generation through Spatial Locality") and frames
pipelined as in diagonal decoding (Ye et al. 2025, "Fast Autoregressive Video Generation with
Diagonal Decoding"): the rows of frame t start before frame t-1 is finished.

The clip is one tall canvas of T*H rows of W cells, in the model's order (frames, then raster).
Row (t, r) takes its next cell c once
- inside the frame (ZipAR): row (t, r-1) has min(c + window, W) cells;
- across frames: row (t-1, min(r + radius, H-1)) has min(c + radius + 1, W) cells,
where `radius` is how far the model's attention reaches into the previous frame
(`config.extra["radius"]`: cell (t, r, c) sees the cells of frame t-1 within `radius` rows and
columns, and nothing older; None = the whole previous frame, so frame t waits for frame t-1).
The query for a frame's first cell sits on the previous frame's last cell, which a video prior
built this way reads as its frame-start token (vision/video/prior.py), so it needs no real token.

Guarantee: with window=None (whole rows inside a frame) every cell is sampled from exactly the
conditional `ar` samples it from (its attention sees finished cells only): exact, greedy output
equals `ar`'s; this is `diagonal`. A window < W overlaps rows inside a frame as ZipAR does: lossy.
A radius below the model's starts frames earlier than their window is finished: lossy too.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

from ...loop import DecodeState
from .zipar import RasterCanvas, ZipAR
from ..options import option


def video_grid_of(model) -> tuple[tuple[int, int], int | None]:
    """((H, W), radius) of a video adapter's frames; a clear error for models without them."""
    from ...models.adapters import as_adapter
    extra = as_adapter(model).config.extra
    grid = extra.get("video_grid")
    if grid is None or len(grid) != 3:
        raise ValueError("this decoder generates video: pass an adapter whose config.extra has 'video_grid': "
                         "(T, H, W) (e.g. vision.load_video_pipeline().prior), or set grid=(H, W)")
    return (int(grid[1]), int(grid[2])), extra.get("radius")


@dataclass(frozen=True)
class VideoZipAR(ZipAR):
    window: int | None = option(4, 1)                # cells of row r before row r+1 starts (None: whole rows)
    grid: tuple[int, int] | None = None    # (H, W) of a frame; None = the adapter's video_grid
    radius: int | None = None              # the model's reach into frame t-1 (None after bind: whole frame)

    name: ClassVar[str] = "video_zipar"

    def bind(self, model) -> "VideoZipAR":
        if self.grid is not None:
            return self
        grid, radius = video_grid_of(model)
        return dataclasses.replace(self, grid=grid, radius=radius if self.radius is None else self.radius)

    def start(self, state: DecodeState) -> None:
        if self.grid is None:
            raise ValueError(f"{self.name} needs the frame grid: decode through suite.generate or call .bind(model)")
        if self.window is not None and self.window < 1:
            raise ValueError(f"{self.name} window must be >= 1 or None (whole rows), got {self.window}")
        if self.radius is not None and self.radius < 0:
            raise ValueError(f"{self.name} radius must be >= 0 or None (the whole previous frame), got {self.radius}")
        if self.adaptive:
            raise ValueError(f"{self.name} has no adaptive window; use adaptive=False")
        h, w = self.grid
        if state.max_new_tokens % (h * w):
            raise ValueError(f"{self.name} generates whole {h}x{w} frames: max_new_tokens must be a multiple of "
                             f"{h * w}, got {state.max_new_tokens}")
        frames = state.max_new_tokens // (h * w)
        state.rows = [self.row_type(RasterCanvas.empty(frames * h, w, state.prompt_lengths[b]))
                      for b in range(state.batch)]

    def active_rows(self, canvas: RasterCanvas) -> list[int]:
        h, w = self.grid
        lag = w if self.window is None else min(self.window, w)
        rows = []
        for row in range(canvas.height):
            n = canvas.row_len[row]
            if n == w:
                continue
            t, r = divmod(row, h)
            if r > 0 and canvas.row_len[row - 1] < min(n + lag, w):
                continue
            if t > 0 and not self.frame_ready(canvas, (t - 1) * h, r, n):
                continue
            rows.append(row)
        return rows

    def frame_ready(self, canvas: RasterCanvas, first: int, r: int, c: int) -> bool:
        """Whether frame t-1 (its first canvas row `first`) has every cell that cell (r, c) of
        frame t sees."""
        h, w = self.grid
        if self.radius is None:
            return canvas.row_len[first + h - 1] == w
        return canvas.row_len[first + min(r + self.radius, h - 1)] >= min(c + self.radius + 1, w)


@dataclass(frozen=True)
class Diagonal(VideoZipAR):
    """Frames pipelined, rows inside a frame in raster order: exact."""

    window: int | None = None

    name: ClassVar[str] = "diagonal"
