"""Files written whole, JSON, and parasuite's cache folder.

Every writer here writes beside the final name and renames into place (`os.replace`), so a reader
sees the old file or the new one, never half of one. Only the standard library is imported at
module import time (safetensors loads on first use of `save_weights` / `load_weights`).
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterator

_MISSING = object()


def cache_dir(*parts: str) -> Path:
    """parasuite's cache folder, joined with `parts`: $PARASUITE_CACHE, else
    $XDG_CACHE_HOME/parasuite, else ~/.cache/parasuite (not created here)."""
    root = os.environ.get("PARASUITE_CACHE")
    if root:
        base = Path(root).expanduser()
    else:
        xdg = os.environ.get("XDG_CACHE_HOME")
        base = (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "parasuite"
    return base.joinpath(*parts)


_READ_VALUE = re.compile(r" ?\(value: [^\n]*\)")


def without_values(message: str) -> str:
    """`message` less the values a library quotes from a file it read ("expected int, got str (value:
    '...')"): an error names the field and the fix, never what a file holds."""
    return _READ_VALUE.sub("", message)


def _file_mode() -> int:
    """The mode a plain `open(path, "w")` would give a new file (0o666 less the umask)."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """A temporary path beside `path` (same folder, same suffix) to write into; renamed onto
    `path` when the block ends, removed if it raises. The folder must exist.

        with atomic_path(out / "codes.pt") as tmp:
            torch.save(codes, tmp)
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=f".tmp{path.suffix}", dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, _file_mode())      # mkstemp's 0o600, or a writer's own, becomes the usual mode
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def write_bytes(path: str | os.PathLike, data: bytes) -> None:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def write_json(path: str | os.PathLike, obj: Any, indent: int | None = 2) -> None:
    """`obj` as JSON (`indent=None`: compact, one line)."""
    write_text(path, json.dumps(obj, indent=indent))


def read_json(path: str | os.PathLike, default: Any = _MISSING) -> Any:
    """The JSON in `path`; `default` where the file is missing or not JSON (without a default,
    those errors propagate)."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        if default is _MISSING:
            raise
        return default


@contextlib.contextmanager
def atomic_folder(dest: str | os.PathLike) -> Iterator[Path]:
    """A new temporary folder beside `dest` to fill; when the block ends it replaces `dest` whole
    (folder 0o755, files 0o644), and is removed if the block raises."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{dest.name}-"))
    try:
        yield tmp
        _swap_in(tmp, dest)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)


def _swap_in(tmp: Path, dest: Path) -> None:
    os.chmod(tmp, 0o755)
    for child in tmp.iterdir():
        os.chmod(child, 0o644)
    old = dest.with_name(dest.name + ".old")
    if old.exists():
        shutil.rmtree(old)
    if dest.exists():
        os.replace(dest, old)
    os.replace(tmp, dest)
    if old.exists():
        shutil.rmtree(old)


WEIGHTS_FILE, CONFIG_FILE = "model.safetensors", "config.json"


def save_weights(folder: str | os.PathLike, state: dict, config: dict, indent: int = 2,
                 metadata: dict | None = None, skip: tuple[str, ...] = ()) -> None:
    """A model folder: `state`'s tensors (detached, on the CPU, contiguous; keys in `skip` left
    out) as model.safetensors, then `config` as config.json; each file written whole."""
    from safetensors.torch import save_file
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().cpu().contiguous() for k, v in state.items() if k not in skip}
    with atomic_path(folder / WEIGHTS_FILE) as tmp:
        save_file(tensors, str(tmp), metadata=metadata)
    write_json(folder / CONFIG_FILE, config, indent=indent)


def load_weights(folder: str | os.PathLike) -> dict:
    """The tensors of a folder written by `save_weights` (on the CPU)."""
    from safetensors.torch import load_file
    return load_file(str(Path(folder) / WEIGHTS_FILE))


class ConfigModule:
    """Mixin of a torch module built from one dataclass, `self.config`, and kept as a folder:
    config.json (`model_type` and the config's fields, indent 2) beside model.safetensors.
    Subclasses set `model_type`, `config_class`, `what` (its name in messages), `train_command`
    (what makes the weights) and, optionally, `default_folder`."""

    model_type: str
    config_class: type
    what: str
    train_command: str
    default_folder: Path | None = None

    def save(self, folder: str | os.PathLike) -> None:
        from dataclasses import asdict
        save_weights(folder, self.state_dict(), {"model_type": self.model_type, **asdict(self.config)},
                     metadata={"format": "pt"})

    @classmethod
    def load(cls, folder: str | os.PathLike | None = None):
        """The module saved in `folder` (default `default_folder`), in eval mode."""
        folder = Path(folder) if folder else cls.default_folder
        if folder is None or not (folder / WEIGHTS_FILE).exists():
            raise FileNotFoundError(f"no {cls.what} weights in {folder}; train them with `{cls.train_command}`")
        fields = read_json(folder / CONFIG_FILE)
        fields.pop("model_type", None)
        module = cls(cls.config_class(**fields))
        module.load_state_dict(load_weights(folder))
        return module.eval()
