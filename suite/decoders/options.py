"""Decoder options declared with their valid values, and the one check every way in runs.

A decoder's option is a field of its frozen dataclass. `option(default, lo, hi)` declares its range
(`choices=` for a word, `operator=True` for one only whoever runs the process sets, such as a corpus
size: never a request); a plain field gets the default range of its type. `check_option` runs for every
option given to `suite.make_decoder`, so the Python API, the CLIs, the apps and the server refuse the
same values with the same words. Object options (a model, a corpus, a cost curve) are not checked here:
no front end lets a person type them.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import Field, field, fields

RANGES = {int: (0, 4096), float: (0.0, 1e6)}    # an option's range unless its field declares one
_KINDS = {"bool": bool, "int": int, "float": float, "str": str}


def option(default, lo=None, hi=None, choices: tuple | None = None, operator: bool = False):
    """A decoder option's field: its default and its valid values ([lo, hi], or `choices`); `operator`:
    set by whoever runs the process (a CLI's user, a server's flags), refused from a request."""
    return field(default=default, metadata={"lo": lo, "hi": hi, "choices": choices, "operator": operator})


def option_kind(f: Field) -> type | None:
    """bool, int, float or str for a typed option (`int`, `int | None`, ...); None for an object."""
    parts = [p.strip() for p in str(f.type).split("|")]
    named = [p for p in parts if p != "None"]
    return _KINDS.get(named[0]) if len(named) == 1 else None


def is_operator(f: Field) -> bool:
    return bool(f.metadata.get("operator"))


def bounds(f: Field) -> tuple:
    lo, hi = RANGES.get(option_kind(f), (None, None))
    declared = f.metadata
    return (lo if declared.get("lo") is None else declared["lo"], hi if declared.get("hi") is None else declared["hi"])


def describe(f: Field) -> str:
    """What `f` takes, in words: "an integer in [1, 64]", "one of prompt, repeat, left"."""
    kind = option_kind(f)
    if f.metadata.get("choices"):
        return "one of " + ", ".join(map(str, f.metadata["choices"]))
    if kind is bool:
        return "true or false"
    if kind is str:
        return "a string"
    lo, hi = bounds(f)
    none = " or none" if "None" in str(f.type) else ""
    return f"{'an integer' if kind is int else 'a number'} in [{lo}, {hi}]{none}"


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _fits(f: Field, value) -> bool:
    kind = option_kind(f)
    if value is None:
        return "None" in str(f.type)
    if f.metadata.get("choices"):
        return value in f.metadata["choices"]
    if kind is bool:
        return isinstance(value, bool)
    if kind is str:
        return isinstance(value, str)
    integral = isinstance(value, numbers.Integral) and not isinstance(value, bool)
    real = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
    if not (integral if kind is int else real):
        return False
    lo, hi = bounds(f)
    return lo <= value <= hi


def check_option(cls, name: str, value) -> None:
    """ValueError naming option `name` of decoder class `cls` and what it takes, when `value` does not fit."""
    f = next((f for f in fields(cls) if f.name == name), None)
    if f is None or option_kind(f) is None or _fits(f, value):
        return
    raise ValueError(f"decoder option {name} must be {describe(f)}, got {_short(value)}")


def typable_fields(cls, operator: bool = False) -> list[Field]:
    """The options a person may set from a text box, a command line or a request: typed, not token ids
    (those come from the pipeline), and the operator's only for whoever runs the process (`operator`:
    a command line's user)."""
    return [f for f in fields(cls) if option_kind(f) is not None and (operator or not is_operator(f))
            and not f.name.endswith("_id")]
