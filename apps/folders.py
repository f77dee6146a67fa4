"""Model folders a tab may load: only under the server's models root (`--models-dir`), checked
before anything is read (links, size, config), with the server's paths kept out of messages."""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import gradio as gr


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


def folder_field(elem_id: str, ours: str, kinds: str, note: str = "") -> gr.Textbox:
    """A tab's "Model folder" field: empty = `ours`, else a folder of one of `kinds` under the server's
    models root; hidden when the server has none (`python -m apps` without --models-dir)."""
    info = (f"a {kinds} folder (save_pretrained, with its processor or tokenizer) inside the server's models "
            "folder, by name" + (f"; {note}" if note else ""))
    return gr.Textbox(value="", label="Model folder", placeholder=f"empty = {ours}", info=info, elem_id=elem_id,
                      visible=models_root().path is not None)
