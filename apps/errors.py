"""Errors in a handler: a readable message in the app, the traceback only in the server log."""
from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import gradio as gr


log = logging.getLogger("apps")


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
