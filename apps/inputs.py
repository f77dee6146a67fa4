"""Inputs read before a handler runs: a bad upload or value names the field and the fix."""
from __future__ import annotations

from collections.abc import Callable

import gradio as gr

import suite


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
