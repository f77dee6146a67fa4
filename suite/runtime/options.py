"""Decoder options as people type them ("window=8, init=prompt" in an app, `--option window=8` on a
command line), validated and typed by each option's default: one validation for every CLI and tab."""
from __future__ import annotations


from ..decoders.options import check_option
from ..registry import DECODERS, parse_option


def ui_options(name: str, overrides: dict | None = None, operator: bool = False) -> dict[str, object]:
    """The options of decoder `name` a person can type (suite.decoders.options.typable_fields: no
    objects such as draft_model, and no files or limits but for the `operator`), with their defaults,
    `overrides` applied (e.g. speculative's draft='self:8')."""
    from ..decoders.options import typable_fields
    out = {f.name: f.default for f in typable_fields(DECODERS[name], operator)}
    out.update({k: v for k, v in (overrides or {}).items() if k in out})
    return out


def client_options(name: str, options: dict) -> dict[str, object]:
    """A request's decoder options as a client sent them (a JSON object): only what `ui_options` lists,
    each value of its option's type and in its range. Anything else (a corpus, a draft model or
    weights, which name files; an operator's limit) is refused by name, without echoing the value:
    files and limits are set by whoever runs the server. ValueError naming the field."""
    valid = ui_options(name)
    for key, value in options.items():
        if key not in valid:
            field_name = key if len(key) <= 40 else key[:37] + "..."
            raise ValueError(f"decoder_options.{field_name} is not an option a request may set for {name} "
                             f"(files and limits are the server operator's); its options are: "
                             f"{', '.join(valid) or '(none)'}")
        check_option(DECODERS[name], key, value)
    return dict(options)


def format_options(options: dict[str, object]) -> str:
    return ", ".join(f"{k}={'none' if v is None else str(v).lower() if isinstance(v, bool) else v}"
                     for k, v in options.items())


def parse_options(name: str, text, operator: bool = False) -> dict[str, object]:
    """Parse 'window=8, init=prompt' (a string, or a CLI's list of KEY=VALUE items) for decoder
    `name`, typed by each option's default; `operator`: the operator's options too (a command line,
    whose user runs the process). Raises ValueError naming the fix."""
    valid = ui_options(name, operator=operator)
    out: dict[str, object] = {}
    items = " ".join(text) if isinstance(text, (list, tuple)) else (text or "")
    for item in items.replace(",", " ").split():
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ValueError(f"decoder option {item!r} is not key=value: write e.g. "
                             f"{format_options(valid) or '(this decoder takes no options)'}")
        if key not in valid:
            raise ValueError(f"decoder {name!r} does not take {key!r}; its options are: "
                             f"{', '.join(valid) or '(none)'}")
        out[key] = typed_option(key, raw, valid[key])
        check_option(DECODERS[name], key, out[key])
    return out


def check_values(model, prompt, decoder, max_new_tokens: int, **options) -> None:
    """A decoder's option values checked before a batch job starts (parse_options checks names and
    types): the decoder is started on a throwaway request of `prompt` (its row state made, no forward),
    so a value its `start` refuses (window=-1) is one ValueError up front, not a failure per input."""
    from suite.api import prepare
    _, dec, state = prepare(model, prompt, None, decoder=decoder, max_new_tokens=max_new_tokens, **options)
    dec.start(state)


def typed_option(key: str, raw: str, default):
    low = raw.lower()
    if isinstance(default, bool):
        if low in ("true", "yes", "1", "on"):
            return True
        if low in ("false", "no", "0", "off"):
            return False
        raise ValueError(f"option {key} must be true or false, got {raw!r}")
    if isinstance(default, int):
        try:
            return int(raw)
        except ValueError:
            raise ValueError(f"option {key} must be an integer, got {raw!r}") from None
    if isinstance(default, float):
        try:
            return float(raw)
        except ValueError:
            raise ValueError(f"option {key} must be a number, got {raw!r}") from None
    if default is None:                      # e.g. max_window: typed from the text itself
        return parse_option(f"{key}={raw}")[1]
    return None if low == "none" else raw


def describe_decoders(names) -> str:
    """One line per decoder for a CLI's --help: name, guarantee (from the registry), what it does."""
    from ..registry import decoder_entry
    width = max(map(len, names), default=0)
    lines = []
    for name in names:
        entry = decoder_entry(name)
        lines.append(f"  {name:<{width}}  [{entry.guarantee}] {entry.summary}")
    return "decoders:\n" + "\n".join(lines)


def quality_costs(folder, modality: str) -> dict[str, dict]:
    """decoder -> its measured quality cost (metric, value, ar's value, on what, which table), from
    `folder`/quality.json: the figures BENCHMARKS.md reports for a domain's lossy decoders."""
    from pathlib import Path

    from .storage import read_json
    return read_json(Path(folder) / "quality.json", default={}).get(modality, {})


def measured_at(cost: dict | None, options: dict | None) -> dict | None:
    """`cost` when it was measured at the settings that ran: its "options" (what the bench ran) all
    equal `options` (every option as it ran, suite.registry.effective_options), or either is unknown;
    else None, so no cost measured at other settings is quoted."""
    if not cost:
        return None
    measured = cost.get("options")
    if measured is None or options is None:
        return cost
    return cost if all(options.get(k) == v for k, v in measured.items()) else None


def settings_text(options: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in options.items())


def decoders_used(stats) -> str:
    """What `auto` ran, from its per-step counts (stats.events["auto:<name>"]), most steps first:
    "auto ran ngram 12 steps, ar 3 steps"; "" for any other decoder."""
    counts = {k.split(":", 1)[1]: n for k, n in stats.events.items() if k.startswith("auto:")}
    if not counts:
        return ""
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return "auto ran " + ", ".join(f"{name} {n} step{'s' if n != 1 else ''}" for name, n in ranked)


def guarantee_note(name: str, costs: dict[str, dict] | None = None, kind: str | None = None,
                   options: dict | None = None) -> str:
    """What a CLI's summary line says about its decoder: the registry's guarantee (`kind` for a reader
    outside the registry, e.g. a CTC head; else "") and, for a lossy one, its measured quality cost
    (`costs`, see quality_costs) when it was measured at the `options` that ran (`measured_at`)."""
    from ..registry import REGISTRY
    if name not in REGISTRY and kind is None:
        return ""
    if name == "ar":
        return "ar: the baseline"
    kind, ref = (kind, "ar") if name not in REGISTRY else (REGISTRY[name].guarantee, REGISTRY[name].reference)
    same = f"greedy output equals {ref}'s token for token" if ref == "ar" else \
        f"the same tokens as {ref} for the same settings and seed"
    words = {"exact": f"exact ({same})",
             "in distribution": f"lossless (exact when greedy, {ref}'s distribution when sampling)",
             "lossy": f"lossy (its output may differ from {ref}'s)"}[kind]
    listed = (costs or {}).get(name) if kind == "lossy" else None
    cost = measured_at(listed, options)
    if cost:
        words = (f"lossy: {cost['metric']} {cost['value']} against ar's {cost['ar']} on {cost['on']} "
                 f"({cost['table']}{', ' + cost['date'] if cost.get('date') else ''})")
    elif listed:
        words += (f"; its quality cost was measured at {settings_text(listed['options'])}, not at the settings "
                  "that ran")
    return f"{name}: {words}"


def cli_parser(prog: str, doc: str | None, example: str | None = None):
    """An argparse parser for `python -m <prog>`: its module docstring as the description (kept as
    written), and an example command as the epilog."""
    import argparse
    return argparse.ArgumentParser(prog=prog, description=doc, formatter_class=argparse.RawDescriptionHelpFormatter,
                                   epilog=f"example: {example}" if example else None)

