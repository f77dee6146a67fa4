"""BENCHMARKS.md as a user page, and the quality figures the apps quote, written by the benches.

Each modality has one headline table on the page, between `<!-- bench:KEY -->` and `<!-- /bench:KEY -->`
(decoder, guarantee, speed vs `ar`, forwards, quality cost, machine, command); a bench run with `--write`
replaces its own section (`write_section`) and, for the lossy decoders it scores, its entries of
`<domain>/quality.json` (`write_quality`), with the command and the date beside the figures.
"""
from __future__ import annotations

import datetime
import os
import platform
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from suite.runtime.storage import read_json, write_json, write_text

PAGE = Path(__file__).resolve().parents[2] / "BENCHMARKS.md"
COLUMNS = ("decoder", "guarantee", "speed vs `ar`", "forwards", "quality cost", "machine", "command")
# what every quality.json entry holds (suite.runtime.options.quality_costs reads it; the apps quote it)
QUALITY_KEYS = ("metric", "value", "ar", "on", "table", "command", "date")


@dataclass
class Headline:
    """One decoder's line of a modality's table."""
    decoder: str
    speed: float | None          # its tokens (lines, images) per second over ar's, measured in the same run
    forwards: str                # e.g. "119 (ar 256)": forwards it took, against ar's
    quality: str = ""            # lossy: its metric against ar's; empty: the guarantee says it ("= ar")
    guarantee: str | None = None  # default: the registry's


def add_write_argument(parser) -> None:
    parser.add_argument("--write", action="store_true",
                        help="write this run's headline table into BENCHMARKS.md (its marked section) and the "
                             "measured quality of its lossy decoders into <domain>/quality.json")


def command_line(prog: str, argv=None) -> str:
    """`python -m prog args` as it was run (argv: the bench's arguments; None: sys.argv[1:])."""
    args = sys.argv[1:] if argv is None else list(argv)
    return " ".join(["python -m", prog, *map(shlex.quote, args)])


def machine(note: str = "") -> str:
    """The machine in a few words (CPU, cores, torch threads; a GPU's name when one decoded), and `note`
    (e.g. "loaded: speeds are ratios in one run")."""
    import torch
    where = (torch.cuda.get_device_name() if torch.cuda.is_available() else
             f"{platform.machine()} CPU, {os.cpu_count()} cores, {torch.get_num_threads()} threads")
    return f"{where}{', ' + note if note else ''}"


def today() -> str:
    return datetime.date.today().isoformat()


def _guarantee(name: str) -> str:
    from suite.registry import REGISTRY
    base = name.split(":")[0].split(" ")[0]
    return REGISTRY[base].guarantee if base in REGISTRY else "-"


def headline_table(rows: list[Headline], machine: str, command: str, date: str | None = None) -> str:
    """The markdown table of `rows`, every row measured on `machine` by `command` (on `date`: today)."""
    when = date or today()
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in rows:
        guarantee = r.guarantee or _guarantee(r.decoder)
        quality = r.quality or ("none (= `ar`)" if guarantee == "exact" else
                                "none (`ar`'s distribution; = `ar` when greedy)" if guarantee == "in distribution"
                                else "-")
        speed = "-" if r.speed is None else f"{r.speed:.2f}x"
        lines.append(f"| `{r.decoder}` | {guarantee} | {speed} | {r.forwards} | {quality} | {machine}, {when} | "
                     f"`{command}` |")
    return "\n".join(lines)


def marks(key: str) -> tuple[str, str]:
    return f"<!-- bench:{key} -->", f"<!-- /bench:{key} -->"


def write_section(key: str, body: str, path: str | os.PathLike = PAGE) -> None:
    """Replace what lies between `key`'s markers in the page with `body` (the page written whole)."""
    path = Path(path)
    start, end = marks(key)
    page = path.read_text(encoding="utf-8") if path.exists() else ""
    i, j = page.find(start), page.find(end)
    if i < 0 or j < i:
        raise ValueError(f"{path} has no section {start} ... {end}: add those two lines under the heading the "
                         "table belongs to, then run the bench again")
    write_text(path, page[:i + len(start)] + "\n" + body.strip() + "\n" + page[j:])


def section(key: str, path: str | os.PathLike = PAGE) -> str:
    """What lies between `key`'s markers (the bench's table as last written)."""
    page = Path(path).read_text(encoding="utf-8")
    start, end = marks(key)
    return page[page.index(start) + len(start):page.index(end)].strip()


def quality_entry(metric: str, value: str, ar: str, on: str, table: str, command: str, date: str | None = None,
                  options: dict | None = None) -> dict:
    """One lossy decoder's measured cost as quality.json keeps it (`options`: those it ran with, when not
    its defaults; the apps quote a cost only where those ran)."""
    entry = {"metric": metric, "value": value, "ar": ar, "on": on, "table": table, "command": command,
             "date": date or today()}
    if options is not None:
        entry["options"] = dict(options)
    return entry


def check_quality_entry(entry: dict, where: str) -> None:
    missing = [k for k in QUALITY_KEYS if k not in entry]
    extra = sorted(set(entry) - set(QUALITY_KEYS) - {"options"})
    if missing or extra:
        raise ValueError(f"{where}: quality entry has {'no ' + ', '.join(missing) if missing else ''}"
                         f"{'; ' if missing and extra else ''}{'unknown keys ' + ', '.join(extra) if extra else ''}: "
                         "write it with suite.runtime.bench_page.quality_entry")


def write_quality(folder: str | os.PathLike, modality: str, entries: dict[str, dict]) -> None:
    """Merge `entries` (decoder -> quality_entry) into `folder`/quality.json under `modality`; decoders
    this run did not score keep their entries."""
    path = Path(folder) / "quality.json"
    data = read_json(path, default={})
    for name, entry in entries.items():
        check_quality_entry(entry, f"{path}, {modality}/{name}")
    data[modality] = {**data.get(modality, {}), **entries}
    write_json(path, data)
