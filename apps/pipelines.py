"""One pipeline per process: `Shared` loads a tab's embedded pipeline once, on first use;
`FolderPipelines` adds the model folders a user names (under the server's models root, see
apps.folders), a few at a time over all tabs."""
from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from pathlib import Path

from .folders import check_folder, models_root, scrub

log = logging.getLogger("apps")


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
