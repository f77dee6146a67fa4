"""`auto`'s prior on disk: what each candidate committed per step, its draft width and its slowdown over
the cost curve, per model and machine (the cost curve's key, suite.cost), kept in the cache folder
(auto-prior/<key>.json) so a new process starts from earlier requests' figures instead of probing every
candidate again. Only where the cost curve is measured (PARASUITE_COST=0, as in the tests: nothing is
read or written); PARASUITE_AUTO_PRIOR=0 keeps the prior in the process only. Writes are atomic and at
most one every `EVERY_S` seconds per model (a step never waits on the disk for more than that)."""
from __future__ import annotations

import os
import time
from dataclasses import asdict

EVERY_S = 10.0
_LAST: dict[str, float] = {}


def enabled() -> bool:
    return os.environ.get("PARASUITE_AUTO_PRIOR", "1") != "0" and os.environ.get("PARASUITE_COST", "1") != "0"


class Prior(dict):
    """candidate name -> its figures (auto's Seen), and the file it is kept in (None: this process only)."""
    path = None


def path(adapter):
    from ...cost import model_key
    from ...runtime.storage import cache_dir
    return cache_dir("auto-prior", f"{model_key(adapter)}.json")


def load(adapter, seen_type) -> Prior:
    """candidate name -> seen_type(...) from disk (empty, kept in the process only, when disabled)."""
    out = Prior()
    if not enabled():
        return out
    from ...runtime.storage import read_json
    out.path = path(adapter)
    data = read_json(out.path, default={})
    defaults = asdict(seen_type())              # each field's type, from its default
    for name, values in (data.get("candidates", {}) if isinstance(data, dict) else {}).items():
        if isinstance(values, dict) and set(values) == set(defaults):
            try:
                out[name] = seen_type(**{k: type(defaults[k])(v) for k, v in values.items()})
            except (TypeError, ValueError):
                continue
    return out


def save(prior: dict, force: bool = False) -> None:
    """Write a loaded prior to its file (throttled to one write every EVERY_S per file unless `force`); a
    read-only cache folder keeps it in the process only."""
    target = prior.path if isinstance(prior, Prior) else None
    if target is None or not prior:
        return
    now = time.monotonic()
    if not force and now - _LAST.get(str(target), -EVERY_S) < EVERY_S:
        return
    _LAST[str(target)] = now
    from ...runtime.storage import write_json
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        write_json(target, {"candidates": {name: asdict(s) for name, s in prior.items()},
                            "saved": time.strftime("%Y-%m-%d %H:%M")})
    except OSError:
        pass
