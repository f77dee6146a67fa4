"""Helpers every tab shares: a lazy shared pipeline, decoder options from the registry, the stats
table, and turning errors into readable messages in the UI."""
from __future__ import annotations

import functools
import html
import importlib.util
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import gradio as gr

import suite
from suite.runtime.options import format_options, parse_options, ui_options  # noqa: F401  (the tabs' option box)

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


# -- model folders: only under the server's models root, a few at a time --------------------------------

MODELS_DIR_ENV = "PARASUITE_MODELS_DIR"           # `python -m apps --models-dir DIR` sets it
MAX_FOLDERS_ENV = "PARASUITE_MAX_MODEL_FOLDERS"    # --max-model-folders
MAX_FOLDER_GB_ENV = "PARASUITE_MAX_FOLDER_GB"      # --max-folder-gb
DEFAULT_MAX_FOLDERS, DEFAULT_MAX_FOLDER_GB = 2, 4.0
MAX_FOLDER_ENTRIES = 10_000                        # files and folders walked when checking one folder


@dataclass(frozen=True)
class ModelsRoot:
    """Where the app may load model folders from: `path` (None = nowhere: the fields are hidden and a
    folder is refused), at most `max_folders` loaded at once in this process (all tabs together), each
    at most `max_bytes` of files, so folders take at most max_folders x max_bytes of memory."""
    path: Path | None
    max_folders: int = DEFAULT_MAX_FOLDERS
    max_bytes: int = int(DEFAULT_MAX_FOLDER_GB * 2**30)


def models_root() -> ModelsRoot:
    """The root from the environment ($PARASUITE_MODELS_DIR, which --models-dir sets), read per request."""
    folder = os.environ.get(MODELS_DIR_ENV, "").strip()
    try:
        count = int(os.environ.get(MAX_FOLDERS_ENV) or DEFAULT_MAX_FOLDERS)
        gb = float(os.environ.get(MAX_FOLDER_GB_ENV) or DEFAULT_MAX_FOLDER_GB)
    except ValueError:
        count, gb = DEFAULT_MAX_FOLDERS, DEFAULT_MAX_FOLDER_GB
    return ModelsRoot(Path(folder).resolve() if folder else None, max(count, 1), int(gb * 2**30))


class FolderRefused(ValueError):
    """A model folder the app will not load; the message names the folder as the user typed it."""


def _inside(path: Path, root: Path) -> bool:
    return path == root or path.is_relative_to(root)


def _available(root: Path, limit: int = 12) -> str:
    try:
        names = sorted(p.name for p in root.iterdir() if p.is_dir() and _inside(p.resolve(), root))
    except OSError:
        names = []
    if not names:
        return "there are none yet"
    return "folders there: " + ", ".join(names[:limit]) + (", ..." if len(names) > limit else "")


def check_folder(typed: str, root: ModelsRoot) -> Path:
    """The folder a user typed, resolved under `root.path` (symlinks followed, every entry inside it
    too), else FolderRefused naming `typed` only: never a server path, never what a file holds."""
    shown = typed if len(typed) <= 80 else typed[:77] + "..."
    if root.path is None:
        raise FolderRefused("this server loads no model folders (the embedded model only): leave the model folder "
                            f"empty, or start the app with --models-dir DIR (or ${MODELS_DIR_ENV}) to serve folders "
                            "under DIR")
    if "\x00" in typed:
        raise FolderRefused(f"model folder {shown!r} is not a folder name")
    folder = (root.path / typed).resolve()           # an absolute path stays itself; `..` and links resolved
    if not _inside(folder, root.path):
        raise FolderRefused(f"model folder {shown!r} is outside this server's models folder: give the name of a "
                            f"folder inside it ({_available(root.path)})")
    if folder == root.path or not folder.is_dir():
        raise FolderRefused(f"no model folder {shown!r} in this server's models folder ({_available(root.path)})")
    size, entries = 0, 0
    for here, dirs, files in os.walk(folder, followlinks=True):
        for name in dirs + files:
            entries += 1
            if entries > MAX_FOLDER_ENTRIES:
                raise FolderRefused(f"model folder {shown!r} holds more than {MAX_FOLDER_ENTRIES} files: not a "
                                    "model folder")
            path = Path(here, name)
            if not _inside(path.resolve(), root.path):
                raise FolderRefused(f"model folder {shown!r} links outside this server's models folder: "
                                    "copy the files in instead of linking them")
            if name in files:
                try:
                    size += path.stat().st_size
                except OSError:
                    pass
    if size > root.max_bytes:
        raise FolderRefused(f"model folder {shown!r} holds {size / 2**30:.1f} GB of files, more than this server "
                            f"loads per folder ({root.max_bytes / 2**30:g} GB, --max-folder-gb)")
    config = folder / "config.json"
    if config.is_file():
        import json
        try:
            loaded = json.loads(config.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError):
            loaded = None
        if not isinstance(loaded, dict):
            raise FolderRefused(f"{shown}/config.json is not a JSON object: save the model again with "
                                "save_pretrained(folder), which writes a valid config.json")
        kind = loaded.get("model_type")
        if kind is not None and not (isinstance(kind, str) and _known_model_type(kind)):
            raise FolderRefused(f"{shown}/config.json names a model type transformers does not know: save a model "
                                "of a transformers family with save_pretrained(folder)")
    return folder


def _known_model_type(kind: str) -> bool:
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES
    return kind in CONFIG_MAPPING_NAMES


_ABSOLUTE = re.compile(r"(?<![\w.~\x00-])(?:/[^\s'\"(),:;]+)+")


def scrub(message: str, typed: str, folder: Path, root: Path) -> str:
    """`message` with the server's paths replaced: the folder by what the user typed, paths inside the
    root by their part under it, any other absolute path by its last name."""
    from suite.runtime.storage import without_values
    message = without_values(message)                # what a config held stays on the server
    mark = "\x00folder\x00"
    for path, shown in ((str(folder), mark), (str(root) + os.sep, ""), (str(root), "the models folder")):
        message = message.replace(path, shown)
    message = _ABSOLUTE.sub(lambda m: os.path.basename(m.group(0).rstrip("/")) or "/", message)
    return message.replace(mark, typed)


class _Loaded:
    """Every model folder this process holds, all tabs together, most recently used last."""
    lock = threading.Lock()
    entries: dict = {}                                  # (tab, resolved path) -> Shared


class FolderPipelines:
    """A tab's pipelines: the embedded one (`shared`, as loaded today) for an empty folder, else the
    one `load(folder)` gives (the public loader the CLI uses) for a folder under the server's models
    root (`models_root()`: checked by `check_folder`), loaded once per folder (keyed by its resolved
    path). The process keeps at most `models_root().max_folders` folders over all tabs (`keep`, when
    given, caps this tab's share further). Loads of one folder never run twice; a failed load is not
    kept (the next request tries again, and gets the loader's own error, with the server's paths
    scrubbed, which names `families()`, the families the tab knows, when the folder holds no model)."""

    def __init__(self, shared: Shared, load: Callable[[str], object], families: Callable[[], str],
                 keep: int | None = None):
        self._shared, self._load, self._families, self._keep = shared, load, families, keep

    def get(self, folder: str | None = None):
        typed = (folder or "").strip()
        if not typed:
            return self._shared.get()
        root = models_root()
        path = check_folder(typed, root)
        key = (id(self), path)
        with _Loaded.lock:
            entry = _Loaded.entries.pop(key, None) or Shared(None, functools.partial(self._load_folder, str(path),
                                                                                    typed, root.path))
            _Loaded.entries[key] = entry                # the most recent last
            mine = [k for k in _Loaded.entries if k[0] == id(self)]
            if self._keep is not None and len(mine) > self._keep:
                _Loaded.entries.pop(mine[0])
            while len(_Loaded.entries) > root.max_folders:
                _Loaded.entries.pop(next(iter(_Loaded.entries)))
        try:
            return entry.get()
        except Exception:                               # a bad folder takes no place from a good one
            with _Loaded.lock:
                if _Loaded.entries.get(key) is entry:
                    del _Loaded.entries[key]
            raise

    def _load_folder(self, folder: str, typed: str, root: Path):
        try:
            return self._load(folder)
        except (ValueError, FileNotFoundError) as e:
            message = scrub(str(e), typed, Path(folder), root)
            if (Path(folder) / "config.json").is_file():
                raise ValueError(message) from None     # a model folder: its loader names what is wrong
            raise ValueError(f"{message} (this tab loads folders of: {self._families()})") from None
        except Exception as e:                          # the details go to the server log only
            log.exception("loading a model folder failed")
            first = (str(e).strip().splitlines() or [""])[0]
            raise ValueError(f"model folder {typed!r} could not be loaded ({type(e).__name__}: "
                             f"{scrub(first, typed, Path(folder), root)})") from None


def folder_field(elem_id: str, ours: str, kinds: str, note: str = "") -> gr.Textbox:
    """A tab's "Model folder" field: empty = `ours`, else a folder of one of `kinds` under the server's
    models root; hidden when the server has none (`python -m apps` without --models-dir)."""
    info = (f"a {kinds} folder (save_pretrained, with its processor or tokenizer) inside the server's models "
            "folder, by name" + (f"; {note}" if note else ""))
    return gr.Textbox(value="", label="Model folder", placeholder=f"empty = {ours}", info=info, elem_id=elem_id,
                      visible=models_root().path is not None)


# -- inputs read before a handler runs: a failure names the field and the fix ---------------------------

IMAGE_FIX = "upload a PNG, JPEG, WEBP, BMP or TIFF picture"


def bad_upload(label: str, what: str, fix: str) -> gr.Error:
    return gr.Error(f"{label}: {what}; {fix}", title="Bad input", print_exception=False)


def checked_input(field, what: str, fix: str, read: Callable | None = None):
    """`field` (an input component) whose reading of an upload, when it fails, is refused as a
    gr.Error naming the field (its label), `what` is wrong and the `fix`, rather than Gradio's generic
    error; `read(payload)`, when given, replaces Gradio's own reading (the recording: soundfile, not
    ffprobe). Set on this one component object: no class is subclassed (Gradio writes a .pyi stub
    beside any module that subclasses a component) and no library method is replaced."""
    own = field.preprocess

    def preprocess(payload):
        try:
            return (read or own)(payload) if payload is not None else own(payload)
        except gr.Error:
            raise
        except Exception:
            raise bad_upload(field.label or "Upload", what, fix) from None
    field.preprocess = preprocess
    return field


def quiet_choice_errors(app: gr.Blocks) -> None:
    """Every dropdown and radio of `app`: a value outside its choices (sent through the API) is refused as
    one line naming the field, without the traceback Gradio would print into the server log for it. Set on
    each component object, as `checked_input`."""
    for field in list(app.blocks.values()):
        if isinstance(field, (gr.Dropdown, gr.Radio)):
            own = field.preprocess

            def preprocess(payload, own=own, label=field.label or "Choice"):
                try:
                    return own(payload)
                except gr.Error as e:
                    if not e.print_exception:
                        raise
                    raise gr.Error(f"{label}: {e.message}", title="Bad input", print_exception=False) from None
            field.preprocess = preprocess


def image_input(**kwargs) -> gr.Image:
    """gr.Image(**kwargs) whose upload, when it is not a picture (a text file, a cut PNG), names the field and the fix."""
    return checked_input(gr.Image(**kwargs), "the file is not a picture this app can read", IMAGE_FIX)


def with_folder_decoders(own) -> list[str]:
    """A tab's own decoders, then the lossless chain decoders a vision-language model folder runs
    (suite.models.vlm, as `--model FOLDER` takes them): one dropdown for either; the pipeline refuses the
    ones it cannot run, naming those it can."""
    return list(own) + [n for n in suite.TEXT_DECODERS if n not in own and suite.decoder_entry(n).guarantee != "lossy"]


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


def require_text(what: str, value, example: str) -> str:
    """The text of a text box; empty or only spaces is a ValueError naming what to type."""
    if not (value or "").strip():
        raise ValueError(f"empty {what}: {example}")
    return value


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
def readable_errors(what: str, hide: tuple[str, ...] = ()):
    """Errors as gr.Error: a ValueError's own message (bad input names its fix), else one line (the
    traceback goes to the server log). Each string in `hide` (a server-side upload path) is shown
    as its file name only."""
    try:
        yield
    except gr.Error:
        raise
    except ValueError as e:
        raise gr.Error(_hidden(str(e), hide), title="Bad input", print_exception=False) from None
    except Exception as e:
        log.exception("%s failed", what)
        raise gr.Error(_hidden(f"{what} failed: {type(e).__name__}: {e}", hide), title="Error") from None


def _hidden(message: str, paths: tuple[str, ...]) -> str:
    for path in paths:
        message = message.replace(str(path), os.path.basename(str(path)))
    return message


def guarded(what: str, handler: Callable[..., Iterator], blank: tuple = (), hide_paths=None) -> Callable[..., Iterator]:
    """Wrap a streaming handler so every error reaches the UI as a readable gr.Error, after the
    outputs are set to `blank` (one value per output: no stale result stays beside an error).
    `hide_paths(*args)` names the server paths among the inputs that messages must not show. The
    wrapper keeps the handler's signature, so the API lists its parameters by name."""
    @functools.wraps(handler)
    def run(*args, **kwargs):
        hide = tuple(p for p in (hide_paths(*args, **kwargs) if hide_paths else ()) if p)
        try:
            with readable_errors(what, hide):
                yield from handler(*args, **kwargs)
        except gr.Error:
            if blank:
                yield blank
            raise
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


def font(size: int = 16):
    from PIL import ImageFont
    return ImageFont.load_default(size=size)


def with_scale_bar(picture, forwards: int, title: str = "forward"):
    """`picture` (coloured by step_colours over `forwards`) with its own colour scale below it (the
    ramp from forward 1 to `forwards`, labelled) and a blank band above it for the widget's label."""
    import numpy as np
    from PIL import Image, ImageDraw
    width, top, bar, text = picture.width, 30, 14, 22
    ramp = step_colours(np.linspace(1, max(forwards, 1), width)[None].repeat(bar, 0), forwards)
    out = Image.new("RGB", (width, top + picture.height + bar + text + 6), "white")
    out.paste(picture.convert("RGB"), (0, top))
    out.paste(Image.fromarray(ramp), (0, top + picture.height + 4))
    draw, f = ImageDraw.Draw(out), font(15)
    y = top + picture.height + bar + 6
    draw.text((0, y), f"{title} 1", fill=(20, 20, 20), font=f)
    last = f"{title} {forwards} (the last)"
    draw.text((width - draw.textlength(last, font=f), y), last, fill=(20, 20, 20), font=f)
    return out


# -- what a result is: its decoder's guarantee, measured quality cost, and whether it equals ar ------

# modality -> the package whose quality.json holds its lossy figures
QUALITY_DOMAINS = {"image": "vision", "video": "vision", "grounding": "vision", "document": "document",
                   "speech": "speech", "asr": "speech"}


@functools.cache
def quality_costs(modality: str) -> dict:
    """decoder -> its measured quality cost, from <domain>/quality.json (suite.runtime.options.quality_costs,
    which the CLIs' summary lines read too)."""
    from suite.runtime.options import quality_costs as read_costs
    spec = importlib.util.find_spec(QUALITY_DOMAINS.get(modality, modality))
    if spec is None or spec.origin is None:
        return {}
    return read_costs(Path(spec.origin).parent, modality)


@dataclass(frozen=True)
class Guarantee:
    kind: str           # "exact", "in distribution", "lossy" (suite.registry.GUARANTEES) or "reference"
    summary: str
    reference: str = "ar"


def guarantee_of(decoder: str, own: dict[str, Guarantee] | None = None) -> Guarantee:
    """The registry's guarantee for `decoder`, or a tab's own entry (readers that are not registry
    decoders, such as the ASR's CTC head)."""
    if own and decoder in own:
        return own[decoder]
    entry = suite.decoder_entry(decoder)
    kind = "reference" if decoder == "ar" else entry.guarantee
    return Guarantee(kind, entry.summary, entry.reference)


def guarantee_html(decoder: str, modality: str, own: dict[str, Guarantee] | None = None,
                   options: dict | None = None) -> str:
    """One line: what the decoder guarantees, and for a lossy one its measured quality cost, when it
    was measured at the `options` that ran (every option, suite.registry.effective_options; None:
    unknown), else where it was measured."""
    from suite.runtime.options import measured_at, settings_text
    g = guarantee_of(decoder, own)
    listed = quality_costs(modality).get(decoder) if g.kind == "lossy" else None
    cost = measured_at(listed, options)
    words = {"reference": "the baseline", "exact": f"exact: greedy output equals {g.reference}'s token for token",
             "in distribution": f"lossless: exact when greedy, {g.reference}'s distribution when sampling",
             "lossy": f"lossy: its output may differ from {g.reference}'s"}[g.kind]
    quality = ""
    if cost:
        quality = (f" <span class='ps-quality'>Measured: {html.escape(cost['metric'])} {html.escape(cost['value'])} "
                   f"against ar's {html.escape(cost['ar'])} on {html.escape(cost['on'])} "
                   f"({html.escape(cost['table'])}"
                   f"{', ' + html.escape(cost['date']) if cost.get('date') else ''}).</span>")
    elif listed:
        quality = (f" <span class='ps-quality-elsewhere'>Its quality cost was measured at "
                   f"{html.escape(settings_text(listed['options']))}, not at the settings that ran.</span>")
    return (f"<p class='ps-guarantee' data-decoder='{html.escape(decoder)}' data-guarantee='{g.kind}' "
            f"style='margin:4px 0'><b>{html.escape(decoder)}</b> "
            f"<span style='{BADGE_STYLE[g.kind]};padding:0 6px;border-radius:3px'>{g.kind}</span> "
            f"{html.escape(g.summary)}; {html.escape(words)}.{quality}</p>")


BADGE_STYLE = {"reference": "background:#e9ecef;color:#111", "exact": "background:#c3f0d2;color:#111",
               "in distribution": "background:#c3f0d2;color:#111", "lossy": "background:#ffd8a8;color:#111"}


def same_html(same: bool, what: str, decoder: str, g: Guarantee, sampled: bool = False) -> str:
    """Whether the output equals ar's, and why it may not (sampling, a lossy decoder, another reference)."""
    if same:
        text = f"same {what} as ar"
    elif g.reference != "ar":
        text = f"not the same {what} as ar: {decoder}'s reference is {g.reference}, not ar"
    elif g.kind == "lossy":
        text = f"not the same {what} as ar: {decoder} is lossy"
    elif sampled:
        text = (f"not the same {what} as ar: sampling draws differently ({decoder} keeps ar's distribution, "
                "not its draws)")
    else:
        text = f"not the same {what} as ar"
    return f"<p class='ps-same' data-same='{str(same).lower()}' style='margin:4px 0'>{html.escape(text)}</p>"


def speed_html(rows: list[dict], decoder: str) -> str:
    """When `decoder` ran slower than ar (below 1.00x as the table rounds it), why, in one line: what
    one of its forwards cost here against an ar forward (cost(N) of the N slots it verifies, see
    suite/cost.py) and how much each forward accepted. speedup = (accepted / ar's accepted) / (its
    forward / ar's forward), exactly."""
    base = next((r for r in rows if r["decoder"] == "ar"), None)
    row = next((r for r in rows if r["decoder"] == decoder), None)
    if (base is None or row is None or row is base or row.get("speedup") is None or round(row["speedup"], 2) >= 1
            or min(row["forwards"], base["forwards"]) < 1 or min(row["wall_time_s"], base["wall_time_s"]) <= 0):
        return ""
    cost = (row["wall_time_s"] / row["forwards"]) / (base["wall_time_s"] / base["forwards"])
    accepted, base_accepted = row["tokens"] / row["forwards"], base["tokens"] / base["forwards"]
    text = (f"Why {decoder} is slower than ar here: its drafts cost cost(N) on this machine, one of its forwards "
            f"took {cost:.2f}x an ar forward, and each accepted {accepted:.2f} tokens per step "
            f"(ar {base_accepted:.2f}): "
            f"{accepted / base_accepted:.2f} / {cost:.2f} = {row['speedup']:.2f}x.")
    return f"<p class='ps-speed' style='margin:4px 0'>{html.escape(text)}</p>"


# -- the stats table --------------------------------------------------------------------------------

STAT_COLUMNS = (("decoder", "decoder"), ("guarantee", "guarantee"), ("tokens", "new tokens"),
                ("forwards", "forwards"), ("tokens_per_forward", "tokens / forward"), ("wall_time_s", "wall time (s)"),
                ("tokens_per_second", "tokens / s"), ("speedup", "speedup vs ar"))


def stats_row(decoder: str, stats: suite.DecodeStats, seconds: float, done: bool, tokens: int | None = None) -> dict:
    """One row of the table; `seconds` is the decoder's own time (see TimedIterator); `tokens`
    overrides what counts as one (e.g. codes rather than frames for speech). A reader that made no
    forward (a CTC head) has no tokens per forward."""
    tokens = stats.num_new_tokens if tokens is None else tokens
    forwards = stats.num_forwards
    return {"decoder": decoder, "tokens": tokens, "forwards": forwards,
            "tokens_per_forward": tokens / forwards if forwards else None, "wall_time_s": seconds,
            "tokens_per_second": tokens / seconds if seconds > 0 else 0.0, "done": done}


def add_speedups(rows: list[dict]) -> list[dict]:
    """Speedup over ar = a row's tokens/s divided by ar's (a ratio of rates, so runs that stop at
    different lengths still compare fairly); filled in once both runs are done."""
    base = next((r for r in rows if r["decoder"] == "ar"), None)
    for r in rows:
        ok = base is not None and base["done"] and r["done"] and base["tokens_per_second"] > 0
        r["speedup"] = r["tokens_per_second"] / base["tokens_per_second"] if ok else None
    return rows


def stats_table(rows: list[dict], note: str = "", guarantees: dict[str, str] | None = None) -> str:
    """HTML table; each cell carries data-stat so tests (and people with devtools) can read it. A
    running row shows dashes until its first result; `guarantees` maps decoder -> its guarantee."""
    head = "".join(f"<th style='text-align:left;padding:4px 10px'>{html.escape(label)}</th>"
                   for _, label in STAT_COLUMNS)
    body = []
    for r in rows:
        started = r["done"] or r["forwards"] > 0
        values = {**r, "guarantee": (guarantees or {}).get(r["decoder"])}
        cells = "".join(f"<td data-stat='{key}' style='padding:4px 10px'>"
                        f"{_fmt(key, values.get(key) if started or key in ('decoder', 'guarantee') else None)}</td>"
                        for key, _ in STAT_COLUMNS)
        state = "done" if r["done"] else "running"
        body.append(f"<tr data-decoder='{html.escape(r['decoder'])}' data-state='{state}'>{cells}</tr>")
    note_html = f"<p class='ps-note' style='margin:6px 0 0 0'>{html.escape(note)}</p>" if note else ""
    return (f"<table style='border-collapse:collapse;width:100%'>"
            f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>{note_html}")


def summary_html(rows: list[dict], modality: str, decoder: str, same: tuple[bool, str, bool] | None = None,
                 note: str = "", own: dict[str, Guarantee] | None = None, options: dict | None = None) -> str:
    """The result's whole account: the chosen decoder's guarantee (and measured quality cost), the
    stats table with each row's guarantee, whether the output equals ar's (`same` = (equal, what is
    compared, sampled), once both are done) and why a slower decoder is slower."""
    rows = add_speedups(rows)
    kinds = {r["decoder"]: guarantee_of(r["decoder"], own).kind for r in rows}
    parts = [guarantee_html(decoder, modality, own, options), stats_table(rows, note, kinds)]
    if same is not None:
        parts.append(same_html(same[0], same[1], decoder, guarantee_of(decoder, own), same[2]))
    parts.append(speed_html(rows, decoder))
    return f"<div class='ps-stats'>{''.join(parts)}</div>"


def _fmt(key: str, value) -> str:
    if value is None:
        return "–"
    if key in ("decoder", "guarantee"):
        return html.escape(str(value))
    if key == "speedup":
        return f"{value:.2f}x"
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)
