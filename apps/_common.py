"""Helpers every tab shares: a lazy shared pipeline, decoder options from the registry, the stats
table, and turning errors into readable messages in the UI."""
from __future__ import annotations

import html
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import gradio as gr

import suite
from suite.options import format_options, parse_options, ui_options  # noqa: F401  (the tabs' option box)

log = logging.getLogger("apps")


# -- one pipeline per process, loaded on first use and shared by every request --------------------

class Shared:
    """Holds a pipeline given up front, or loads it once (thread-safe) on first `get()`."""

    def __init__(self, pipeline, loader: Callable[[], object]):
        self._pipeline, self._loader, self._lock = pipeline, loader, threading.Lock()

    def get(self):
        if self._pipeline is None:
            with self._lock:
                if self._pipeline is None:
                    self._pipeline = self._loader()
        return self._pipeline


def sampling_args(temperature, top_k, top_p, seed) -> dict:
    """Sampling settings from the UI widgets: top_k 0 and top_p 1 mean off, an empty seed is random."""
    temperature = float(temperature or 0.0)
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0 (0 = greedy), got {temperature}")
    top_k = None if top_k in (None, "") or int(top_k) == 0 else int(top_k)
    if top_k is not None and top_k < 0:
        raise ValueError(f"top-k must be >= 0 (0 = off), got {top_k}")
    top_p = None if top_p in (None, "") or float(top_p) >= 1.0 else float(top_p)
    if top_p is not None and top_p <= 0:
        raise ValueError(f"top-p must be in (0, 1] (1 = off), got {top_p}")
    seed = None if seed in (None, "") else int(seed)
    return {"temperature": temperature, "top_k": top_k, "top_p": top_p, "seed": seed}


def positive_int(name: str, value) -> int:
    try:
        n = int(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a positive integer, got {value!r}") from None
    if n < 1 or n != float(value):
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return n


# -- errors: a readable message in the app, the traceback only in the server log ----------------------

@contextmanager
def readable_errors(what: str):
    try:
        yield
    except gr.Error:
        raise
    except ValueError as e:   # bad input: the library's message already names the fix
        raise gr.Error(str(e), title="Bad input", print_exception=False) from None
    except Exception as e:    # a bug: log it, show one line, keep serving
        log.exception("%s failed", what)
        raise gr.Error(f"{what} failed: {type(e).__name__}: {e}", title="Error") from None


def guarded(what: str, handler: Callable[..., Iterator]) -> Callable[..., Iterator]:
    """Wrap a streaming handler so every error reaches the UI as a readable gr.Error."""
    def run(*args):
        with readable_errors(what):
            yield from handler(*args)
    run.__name__ = getattr(handler, "__name__", "run")
    return run


# -- a timed run: decode time counts only the decoder's own work, not the UI's ------------------------

class TimedIterator:
    """Wraps an iterator; `elapsed` sums the time spent inside next(), so interleaving two runs
    or rendering between steps does not count against either."""

    def __init__(self, iterable):
        self._it = iter(iterable)
        self.elapsed = 0.0
        self.done = False

    def step(self):
        t0 = time.perf_counter()
        try:
            return next(self._it)
        except StopIteration:
            self.done = True
            return None
        finally:
            self.elapsed += time.perf_counter() - t0


def race(runs):
    """Advance the unfinished run (anything with .done, .timer and .advance()) that has used the least
    decode time so far, so side-by-side runs fill in as fast as each really goes; yield after each step."""
    while True:
        pending = [r for r in runs if not r.done]
        if not pending:
            return
        min(pending, key=lambda r: r.timer.elapsed).advance()
        yield


def throttled(steps, every_s: float = 0.05):
    """Yield after `steps` at most every `every_s` seconds, and at the end unless nothing stepped since
    the last yield (a repeated final picture can leave the browser showing a broken image)."""
    last, unseen = time.perf_counter(), False
    for _ in steps:
        unseen = True
        if time.perf_counter() - last >= every_s:
            yield
            last, unseen = time.perf_counter(), False
    if unseen:
        yield


# -- pictures of when things were decided --------------------------------------------------------------

# a perceptual ramp (viridis anchors): early forwards dark blue, late ones yellow
RAMP = ((68, 1, 84), (59, 82, 139), (33, 145, 140), (94, 201, 98), (253, 231, 37))
UNDECIDED = (200, 200, 200)


def step_colours(decided_at, forwards: int):
    """(..., ) forward indices (1-based; 0 = not decided yet) -> (..., 3) uint8 RGB on the ramp."""
    import numpy as np
    ramp = np.array(RAMP, dtype=float)
    decided_at = np.asarray(decided_at)
    t = (decided_at - 1) / max(forwards - 1, 1)                 # 0 = first forward, 1 = last
    pos = np.clip(t, 0, 1) * (len(ramp) - 1)
    lo = np.floor(pos).astype(int).clip(max=len(ramp) - 2)
    frac = (pos - lo)[..., None]
    rgb = ramp[lo] * (1 - frac) + ramp[lo + 1] * frac
    rgb[decided_at <= 0] = UNDECIDED
    return rgb.round().astype(np.uint8)


def nearest_resize(image, width: int):
    """Upscale a small PIL picture to `width` pixels wide, keeping its cells sharp."""
    from PIL import Image
    if image is None:
        return None
    return image.resize((width, max(1, round(width * image.height / image.width))), Image.NEAREST)


# -- the stats table --------------------------------------------------------------------------------

STAT_COLUMNS = (("decoder", "decoder"), ("tokens", "new tokens"), ("forwards", "forwards"),
                ("tokens_per_forward", "tokens / forward"), ("wall_time_s", "wall time (s)"),
                ("tokens_per_second", "tokens / s"), ("speedup", "speedup vs ar"))


def stats_row(decoder: str, stats: suite.DecodeStats, seconds: float, done: bool, tokens: int | None = None) -> dict:
    """One row of the table; `seconds` is the decoder's own time (see TimedIterator); `tokens`
    overrides what counts as one (e.g. codes rather than frames for speech)."""
    tokens = stats.num_new_tokens if tokens is None else tokens
    return {"decoder": decoder, "tokens": tokens, "forwards": stats.num_forwards,
            "tokens_per_forward": tokens / max(stats.num_forwards, 1), "wall_time_s": seconds,
            "tokens_per_second": tokens / seconds if seconds > 0 else 0.0, "done": done}


def add_speedups(rows: list[dict]) -> list[dict]:
    """Speedup over ar = a row's tokens/s divided by ar's (a ratio of rates, so runs that stop at
    different lengths still compare fairly); filled in once both runs are done."""
    base = next((r for r in rows if r["decoder"] == "ar"), None)
    for r in rows:
        ok = base is not None and base["done"] and r["done"] and base["tokens_per_second"] > 0
        r["speedup"] = r["tokens_per_second"] / base["tokens_per_second"] if ok else None
    return rows


def stats_table(rows: list[dict], note: str = "") -> str:
    """HTML table; each cell carries data-stat so tests (and people with devtools) can read it."""
    head = "".join(f"<th style='text-align:left;padding:4px 10px'>{html.escape(label)}</th>"
                   for _, label in STAT_COLUMNS)
    body = []
    for r in rows:
        cells = "".join(f"<td data-stat='{key}' style='padding:4px 10px'>{_fmt(key, r.get(key))}</td>"
                        for key, _ in STAT_COLUMNS)
        state = "done" if r["done"] else "running"
        body.append(f"<tr data-decoder='{html.escape(r['decoder'])}' data-state='{state}'>{cells}</tr>")
    note_html = f"<p class='ps-note' style='margin:6px 0 0 0'>{html.escape(note)}</p>" if note else ""
    return (f"<div class='ps-stats'><table style='border-collapse:collapse;width:100%'>"
            f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>{note_html}</div>")


def _fmt(key: str, value) -> str:
    if value is None:
        return "–"
    if key == "decoder":
        return html.escape(str(value))
    if key == "speedup":
        return f"{value:.2f}x"
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)
