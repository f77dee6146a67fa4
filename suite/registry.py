"""The one registry of decoders: CLIs, apps and the test matrix all read it."""
from __future__ import annotations

import dataclasses

from .decoders.ar import AR
from .decoders.jacobi import Jacobi
from .decoders.lookahead import Lookahead
from .decoders.mc_sjd import MCSJD
from .decoders.ngram import Ngram
from .decoders.sjd import SJD
from .decoders.speculative import Speculative

DECODERS: dict[str, type] = {cls.name: cls for cls in (AR, Jacobi, SJD, MCSJD, Lookahead, Ngram, Speculative)}
# the decoders that run on any causal LM (domain packages register theirs, e.g. block_diffusion)
TEXT_DECODERS: tuple[str, ...] = tuple(DECODERS)


def register(cls: type) -> type:
    """Add a decoder class (a frozen dataclass with `name`) to the registry; usable as a decorator."""
    DECODERS[cls.name] = cls
    return cls


def decoder_options(name: str) -> dict[str, object]:
    """The options a decoder takes, with their defaults."""
    return {f.name: f.default for f in dataclasses.fields(get_decoder_class(name))}


def parse_option(item: str) -> tuple[str, object]:
    """'window=3' -> ('window', 3): a CLI's decoder option, typed as bool, None, int, float or str."""
    key, sep, raw = item.partition("=")
    if not sep or not key:
        raise ValueError(f"decoder option {item!r} is not KEY=VALUE: write e.g. window=3")
    low = raw.lower()
    if low in ("true", "false"):
        return key, low == "true"
    if low in ("none", "null"):
        return key, None
    for kind in (int, float):
        try:
            return key, kind(raw)
        except ValueError:
            pass
    return key, raw


def get_decoder_class(name: str) -> type:
    if name not in DECODERS:
        raise ValueError(f"unknown decoder {name!r}; choose one of: {', '.join(sorted(DECODERS))}")
    return DECODERS[name]


def make_decoder(name: str, **options):
    """Build a decoder by name; an option it does not take is a ValueError naming the valid ones."""
    cls = get_decoder_class(name)
    valid = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(options) - valid)
    if unknown:
        raise ValueError(f"decoder {name!r} does not take {', '.join(unknown)}; "
                         f"its options are: {', '.join(sorted(valid)) or '(none)'}")
    return cls(**options)
