"""A batch job's inputs and outcomes, and its manifest: one JSON row per input (ok / skipped /
error with the message, the fingerprint of the settings that made it), read back to resume."""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..storage import write_text


class BatchError(ValueError):
    """A user error of the batch engine (Ray missing, cluster unreachable, bad flags): one line."""


@dataclass
class Item:
    key: str                           # names the input in messages and in the manifest (e.g. its path)
    payload: dict                      # what the worker gets: plain picklable values
    outputs: tuple[Path, ...] = ()     # the files that exist once this input is done
    error: str | None = None           # known bad before any worker runs (a request that does not parse):
                                       # its error row comes from the driver, no worker is started for it


@dataclass
class BatchJob:
    name: str                          # the progress bar's label, e.g. "document"
    items: list[Item]
    worker: type                       # Worker(**worker_args); worker(payload) -> result dict
    worker_args: dict
    write: Callable[[Item, dict], None]            # on the driver: one input's outputs, atomically
    fields: tuple[str, ...] = ()       # the keys of a result (the row schema); checked on every row
    manifest: Path | None = None       # JSONL, one row per input (None: no manifest, no resume)
    settings: dict | None = None       # what the outputs depend on (default: worker_args less threads)
    is_done: Callable[[Item], bool] | None = None  # resume rule; default: manifest row with these settings
    ordered: bool = False              # write results in input order (outputs printed to stdout)
    echo_errors: bool = True           # print each error once, above the progress bar
    unit: str = "file"


@dataclass
class Outcome:
    item: Item
    status: str                        # "ok", "skipped" or "error"
    message: str = ""
    result: dict | None = None
    seconds: float = 0.0
    settings: str | None = None        # a skipped input: the fingerprint of the run that did it


@dataclass
class Summary:
    name: str
    outcomes: list[Outcome]
    seconds: float
    unit: str = "file"

    def count(self, status: str) -> int:
        return sum(o.status == status for o in self.outcomes)

    @property
    def done(self) -> int:
        return self.count("ok")

    @property
    def failed(self) -> int:
        return self.count("error")

    @property
    def throughput(self) -> float:
        """Inputs done per second of this run."""
        return self.done / self.seconds if self.seconds > 0 else 0.0

    @property
    def exit_code(self) -> int:
        """0 when every input was read, 1 when some failed (user errors are 2, before a batch runs)."""
        return 1 if self.failed else 0

    def line(self) -> str:
        return (f"{self.name}: {self.done} done, {self.count('skipped')} skipped, {self.failed} failed "
                f"in {self.seconds:.1f} s ({self.throughput:.2f} {self.unit}/s)")


def error_message(key: str, exc: BaseException) -> str:
    """One line naming the input: the message of a ValueError/OSError, else the exception's type too."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    if not isinstance(exc, (ValueError, OSError)):
        text = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return text if key in text else f"{key}: {text}"


# -- the manifest ---------------------------------------------------------------------------------

def fingerprint(settings: dict) -> str:
    return hashlib.sha1(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:12]


def read_manifest(path: Path | None) -> dict[str, dict]:
    """The last row per input of a manifest (a line cut short by a crash is ignored)."""
    rows: dict[str, dict] = {}
    if path is None or not path.exists():
        return rows
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
            rows[row["input"]] = row
        except (ValueError, KeyError, TypeError):
            continue
    return rows


def manifest_row(o: Outcome, fp: str) -> dict:
    return {"input": o.item.key, "status": o.status, "message": o.message, "seconds": round(o.seconds, 3),
            "settings": o.settings or fp}


def done_by_manifest(previous: dict[str, dict], fp: str) -> Callable[[Item], bool]:
    def done(item: Item) -> bool:
        row = previous.get(item.key)
        return (row is not None and row.get("status") in ("ok", "skipped") and row.get("settings") == fp
                and bool(item.outputs) and all(Path(p).exists() for p in item.outputs))
    return done


def compact_manifest(job: BatchJob, outcomes: list[Outcome], previous: dict[str, dict], fp: str) -> None:
    """Rewrite the manifest whole: one row per input of the job, in input order (inputs not reached
    keep their previous row)."""
    latest = {o.item.key: manifest_row(o, fp) for o in outcomes}
    rows = [latest.get(it.key) or previous.get(it.key) for it in job.items]
    write_text(job.manifest, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows if r))
