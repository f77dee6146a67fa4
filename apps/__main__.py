"""`python -m apps`: every modality's demo as one tab of one Gradio app (see --help)."""
from __future__ import annotations

import argparse
import html
import importlib
import logging
import os
import signal
import socket
import sys
from dataclasses import dataclass

EXAMPLES = """\
examples:
  python -m apps                          serve on http://127.0.0.1:7860 until Ctrl-C
  python -m apps --port 8080 --host 0.0.0.0
  python -m apps --tabs text              only some tabs
  python -m apps --models-dir /srv/models  the tabs' "Model folder" fields load folders inside /srv/models

Each tab is apps/<modality>.py with load_pipeline() and build_demo(pipeline=None). A tab whose
package or weights are missing is left out, with one line on stderr saying why; a tab that fails
for another reason (a bug) shows its error in the tab. GRADIO_SERVER_PORT and GRADIO_SERVER_NAME
set the defaults of --port and --host.

Model folders: without --models-dir (or $PARASUITE_MODELS_DIR) the tabs run their embedded models only
and the "Model folder" fields are hidden. With it, a user names a folder inside that directory (links
are followed and must stay inside it); the process keeps at most --max-model-folders of them loaded
(all tabs together, the least recently used goes first), each at most --max-folder-gb of files, so
folders take at most their product in memory. Errors name the folder as the user typed it.
"""


@dataclass(frozen=True)
class Tab:
    key: str        # --tabs name
    title: str      # tab label
    module: str     # apps module with load_pipeline() and build_demo(pipeline)


# The one list of tabs, in display order.
TABS = [
    Tab("text", "Text", "apps.text"),
    Tab("image", "Image", "apps.image"),
    Tab("video", "Video", "apps.video"),
    Tab("grounding", "Grounding", "apps.grounding"),
    Tab("document", "Document", "apps.document"),
    Tab("speech", "Speech", "apps.speech"),
]


log = logging.getLogger("apps")
# what a missing package or missing weights raise: the tab is left out with one line; anything else is a bug
MISSING = (ImportError, OSError, ValueError, RuntimeError)


def note(message: str) -> None:
    print(f"apps: {message}", file=sys.stderr, flush=True)


def one_line(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return f"{type(e).__name__}: {lines[0] if lines else ''}"


@dataclass(frozen=True)
class Broken:
    """A tab whose loading or building failed with a bug: it shows this error instead of its demo."""
    error: str


def load_tabs(keys: list[str] | None = None) -> list[tuple[Tab, object, object]]:
    """(tab, module, pipeline) for every tab whose module imports and whose pipeline loads; a tab
    that fails with a bug comes with module None and a Broken pipeline."""
    ready = []
    for tab in TABS:
        if keys is not None and tab.key not in keys:
            continue
        try:
            module = importlib.import_module(tab.module)
            pipeline = module.load_pipeline()
        except MISSING as e:      # missing app, package or weights: leave the tab out, keep the rest
            note(f"no {tab.title} tab: {one_line(e)}")
            continue
        except Exception as e:    # a bug: keep the tab, showing the error (the traceback goes to the log)
            log.exception("loading the %s tab failed", tab.title)
            note(f"{tab.title} tab failed to load: {one_line(e)}")
            module, pipeline = None, Broken(f"loading it failed: {one_line(e)}")
        ready.append((tab, module, pipeline))
    return ready


def build_app(loaded: list[tuple[Tab, object, object]]):
    """(the app with one tab per loaded modality, the tab titles). A tab that fails to build shows
    its error in place of its demo."""
    import gradio as gr

    demos = []          # built outside the app's context, then placed in their tabs
    for tab, module, pipeline in loaded:
        if isinstance(pipeline, Broken):
            demos.append((tab, pipeline))
            continue
        try:
            demos.append((tab, module.build_demo(pipeline)))
        except Exception as e:
            log.exception("building the %s tab failed", tab.title)
            note(f"{tab.title} tab failed to build: {one_line(e)}")
            demos.append((tab, Broken(f"building it failed: {one_line(e)}")))
    if not demos:
        raise ValueError("no tab could be built (see the lines above)")
    with gr.Blocks(title="parasuite") as app:
        gr.Markdown("# parasuite: parallel generation\nFewer forward passes per token, across modalities, "
                    "on one shared decoding core.")
        with gr.Tabs():
            for tab, demo in demos:
                with gr.Tab(tab.title, id=tab.key, elem_id=f"tab-{tab.key}"):
                    if isinstance(demo, Broken):
                        gr.HTML(f"<p class='ps-tab-error' style='color:#b00020'>The {html.escape(tab.title)} tab "
                                f"is not available: {html.escape(demo.error)} (the server log has the details).</p>")
                    else:
                        demo.render()
    from .inputs import quiet_choice_errors
    quiet_choice_errors(app)
    return app, [tab.title for tab, _ in demos]


def port_busy(host: str, port: int) -> str | None:
    """Why host:port cannot be served (checked before the models load), or None."""
    try:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((host, port))
    except OSError as e:
        return e.strerror or str(e)
    return None


def quiet_weight_loading() -> None:
    """No transformers progress bars while the tabs load their weights (the log starts with the app's lines)."""
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:
        return
    hf_logging.disable_progress_bar()


def stop_on_signal(signum, frame):
    raise KeyboardInterrupt   # block_thread() closes the server on it, as on Ctrl-C


def theme():
    """The default theme with local fonts (the app runs offline: no font downloads)."""
    import gradio as gr
    return gr.themes.Default(font=["ui-sans-serif", "system-ui", "sans-serif"],
                             font_mono=["ui-monospace", "monospace"])


def parse_args(argv=None) -> argparse.Namespace:
    from suite.models.dtypes import CHOICES as DTYPE_CHOICES
    p = argparse.ArgumentParser(prog="python -m apps", description="Serve parasuite's demos as tabs of one app.",
                                epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    host = os.environ.get("GRADIO_SERVER_NAME") or "127.0.0.1"
    port = os.environ.get("GRADIO_SERVER_PORT") or "7860"
    p.add_argument("--host", default=host,
                   help=f"address to listen on (default: $GRADIO_SERVER_NAME or 127.0.0.1: {host})")
    p.add_argument("--port", type=int, default=None, help=f"port (default: $GRADIO_SERVER_PORT or 7860: {port})")
    p.add_argument("--tabs", default=None, metavar="A,B",
                   help=f"comma-separated subset of: {', '.join(t.key for t in TABS)} (default: all available)")
    p.add_argument("--concurrency", type=int, default=4, metavar="N",
                   help="requests decoded at once per event; more wait in the queue (default: 4)")
    p.add_argument("--models-dir", default=os.environ.get("PARASUITE_MODELS_DIR") or None, metavar="DIR",
                   help="the only folder whose sub-folders the tabs' Model folder fields may load (default: "
                        "$PARASUITE_MODELS_DIR; none: the fields are hidden)")
    p.add_argument("--max-model-folders", type=int, default=None, metavar="N",
                   help="model folders loaded at once in this process, all tabs together (default: 2)")
    p.add_argument("--max-folder-gb", type=float, default=None, metavar="G",
                   help="largest model folder loaded, in GB of files (default: 4)")
    p.add_argument("--dtype", default=None, choices=DTYPE_CHOICES,
                   help="the dtype every tab's models run in (default: $PARASUITE_DTYPE, else auto in the Text tab and float32 in "
                        "the others); auto = bfloat16 "
                        "where the CPU runs it natively or on CUDA. In bfloat16 lossless decoders agree with ar computed "
                        "in bfloat16, up to ties within bf16's rounding.")
    return p.parse_args(argv)


def set_models_root(args) -> str | None:
    """Export the models root and its limits (apps.folders.models_root reads them per request); an
    error message, or None."""
    from apps.folders import (DEFAULT_MAX_FOLDER_GB, DEFAULT_MAX_FOLDERS, MAX_FOLDER_GB_ENV, MAX_FOLDERS_ENV,
                              MODELS_DIR_ENV)
    if args.max_model_folders is not None and args.max_model_folders < 1:
        return f"--max-model-folders must be >= 1, got {args.max_model_folders}"
    if args.max_folder_gb is not None and not args.max_folder_gb > 0:
        return f"--max-folder-gb must be > 0, got {args.max_folder_gb}"
    if args.models_dir is None:
        os.environ.pop(MODELS_DIR_ENV, None)
        return None
    root = os.path.realpath(os.path.expanduser(args.models_dir))
    if not os.path.isdir(root):
        return f"--models-dir {args.models_dir!r} is not a folder: create it and put model folders inside"
    os.environ[MODELS_DIR_ENV] = root
    count = args.max_model_folders or int(os.environ.get(MAX_FOLDERS_ENV) or DEFAULT_MAX_FOLDERS)
    gb = args.max_folder_gb or float(os.environ.get(MAX_FOLDER_GB_ENV) or DEFAULT_MAX_FOLDER_GB)
    os.environ[MAX_FOLDERS_ENV], os.environ[MAX_FOLDER_GB_ENV] = str(count), str(gb)
    note(f"model folders: inside {root}, at most {count} loaded at once, each at most {gb:g} GB of files "
         f"(up to {count * gb:g} GB)")
    return None


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.port is None:
        try:
            args.port = int(os.environ.get("GRADIO_SERVER_PORT") or 7860)
        except ValueError:
            print(f"error: GRADIO_SERVER_PORT must be a port number, got {os.environ['GRADIO_SERVER_PORT']!r}",
                  file=sys.stderr)
            return 2
    keys = None
    if args.tabs is not None:
        keys = [k.strip() for k in args.tabs.split(",") if k.strip()]
        unknown = sorted(set(keys) - {t.key for t in TABS})
        if unknown or not keys:
            print(f"error: unknown tab {', '.join(unknown) or '(none given)'}; choose from "
                  f"{', '.join(t.key for t in TABS)}", file=sys.stderr)
            return 2
    if not 1 <= args.port <= 65535:
        print(f"error: --port must be in 1..65535, got {args.port}", file=sys.stderr)
        return 2
    if args.concurrency < 1:
        print(f"error: --concurrency must be >= 1, got {args.concurrency}", file=sys.stderr)
        return 2
    bad = set_models_root(args)
    if bad:
        print(f"error: {bad}", file=sys.stderr)
        return 2
    if args.dtype is not None:               # every tab's loader reads it (suite.models.dtypes.default_dtype)
        from suite.models.dtypes import DTYPE_ENV
        os.environ[DTYPE_ENV] = args.dtype
    busy = port_busy(args.host, args.port)
    if busy:
        print(f"error: cannot serve on {args.host}:{args.port} ({busy}): pass a free --port", file=sys.stderr)
        return 2
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    quiet_weight_loading()
    loaded = load_tabs(keys)
    if not loaded:
        print("error: no tab could be loaded (see the lines above): install the packages with "
              "`make env` or scripts/setup.sh", file=sys.stderr)
        return 2
    try:
        app, titles = build_app(loaded)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    app.queue(default_concurrency_limit=args.concurrency)
    try:
        app.launch(server_name=args.host, server_port=args.port, prevent_thread_lock=True, quiet=True,
                   theme=theme(), footer_links=["api", "settings"])
    except OSError as e:
        print(f"error: cannot serve on {args.host}:{args.port} ({e}): pass a free --port", file=sys.stderr)
        return 2
    shown = "127.0.0.1" if args.host in ("0.0.0.0", "::") else args.host
    print(f"parasuite demo ({', '.join(titles)}) running at http://{shown}:{args.port}/ "
          "(Ctrl-C to stop)", flush=True)
    signal.signal(signal.SIGINT, signal.default_int_handler)   # Ctrl-C stops it, even if started with SIGINT ignored
    signal.signal(signal.SIGTERM, stop_on_signal)
    app.block_thread()      # until Ctrl-C (or SIGTERM)
    return 0


if __name__ == "__main__":
    sys.exit(main())
