"""What a result is: its decoder's guarantee and measured quality cost, the stats table, whether
the output equals ar's and why a slower decoder is slower (`summary_html`, every tab's account)."""
from __future__ import annotations

import functools
import html
import importlib.util
from dataclasses import dataclass
from pathlib import Path

import suite

# modality -> the package whose quality.json holds its lossy figures
QUALITY_DOMAINS = {"image": "vision", "video": "vision", "grounding": "vision", "document": "document",
                   "speech": "speech", "asr": "speech"}


@functools.cache
def quality_costs(modality: str) -> dict:
    """decoder -> its measured quality cost, from <domain>/quality.json (suite.runtime.options.quality_costs,
    which the CLIs' summary lines read too)."""
    from suite.runtime.options import quality_costs as read_costs
    spec = importlib.util.find_spec(QUALITY_DOMAINS.get(modality, modality))
    if spec is None or spec.origin is None:
        return {}
    return read_costs(Path(spec.origin).parent, modality)


@dataclass(frozen=True)
class Guarantee:
    kind: str           # "exact", "in distribution", "lossy" (suite.registry.GUARANTEES) or "reference"
    summary: str
    reference: str = "ar"


def guarantee_of(decoder: str, own: dict[str, Guarantee] | None = None) -> Guarantee:
    """The registry's guarantee for `decoder`, or a tab's own entry (readers that are not registry
    decoders, such as the ASR's CTC head)."""
    if own and decoder in own:
        return own[decoder]
    entry = suite.decoder_entry(decoder)
    kind = "reference" if decoder == "ar" else entry.guarantee
    return Guarantee(kind, entry.summary, entry.reference)


def guarantee_html(decoder: str, modality: str, own: dict[str, Guarantee] | None = None,
                   options: dict | None = None) -> str:
    """One line: what the decoder guarantees, and for a lossy one its measured quality cost, when it
    was measured at the `options` that ran (every option, suite.registry.effective_options; None:
    unknown), else where it was measured."""
    from suite.runtime.options import measured_at, settings_text
    g = guarantee_of(decoder, own)
    listed = quality_costs(modality).get(decoder) if g.kind == "lossy" else None
    cost = measured_at(listed, options)
    words = {"reference": "the baseline", "exact": f"exact: greedy output equals {g.reference}'s token for token",
             "in distribution": f"lossless: exact when greedy, {g.reference}'s distribution when sampling",
             "lossy": f"lossy: its output may differ from {g.reference}'s"}[g.kind]
    quality = ""
    if cost:
        quality = (f" <span class='ps-quality'>Measured: {html.escape(cost['metric'])} {html.escape(cost['value'])} "
                   f"against ar's {html.escape(cost['ar'])} on {html.escape(cost['on'])} "
                   f"({html.escape(cost['table'])}"
                   f"{', ' + html.escape(cost['date']) if cost.get('date') else ''}).</span>")
    elif listed:
        quality = (f" <span class='ps-quality-elsewhere'>Its quality cost was measured at "
                   f"{html.escape(settings_text(listed['options']))}, not at the settings that ran.</span>")
    return (f"<p class='ps-guarantee' data-decoder='{html.escape(decoder)}' data-guarantee='{g.kind}' "
            f"style='margin:4px 0'><b>{html.escape(decoder)}</b> "
            f"<span style='{BADGE_STYLE[g.kind]};padding:0 6px;border-radius:3px'>{g.kind}</span> "
            f"{html.escape(g.summary)}; {html.escape(words)}.{quality}</p>")


BADGE_STYLE = {"reference": "background:#e9ecef;color:#111", "exact": "background:#c3f0d2;color:#111",
               "in distribution": "background:#c3f0d2;color:#111", "lossy": "background:#ffd8a8;color:#111"}


def same_html(same: bool, what: str, decoder: str, g: Guarantee, sampled: bool = False) -> str:
    """Whether the output equals ar's, and why it may not (sampling, a lossy decoder, another reference)."""
    if same:
        text = f"same {what} as ar"
    elif g.reference != "ar":
        text = f"not the same {what} as ar: {decoder}'s reference is {g.reference}, not ar"
    elif g.kind == "lossy":
        text = f"not the same {what} as ar: {decoder} is lossy"
    elif sampled:
        text = (f"not the same {what} as ar: sampling draws differently ({decoder} keeps ar's distribution, "
                "not its draws)")
    else:
        text = f"not the same {what} as ar"
    return f"<p class='ps-same' data-same='{str(same).lower()}' style='margin:4px 0'>{html.escape(text)}</p>"


def speed_html(rows: list[dict], decoder: str) -> str:
    """When `decoder` ran slower than ar (below 1.00x as the table rounds it), why, in one line: what
    one of its forwards cost here against an ar forward (cost(N) of the N slots it verifies, see
    suite/cost.py) and how much each forward accepted. speedup = (accepted / ar's accepted) / (its
    forward / ar's forward), exactly."""
    base = next((r for r in rows if r["decoder"] == "ar"), None)
    row = next((r for r in rows if r["decoder"] == decoder), None)
    if (base is None or row is None or row is base or row.get("speedup") is None or round(row["speedup"], 2) >= 1
            or min(row["forwards"], base["forwards"]) < 1 or min(row["wall_time_s"], base["wall_time_s"]) <= 0):
        return ""
    cost = (row["wall_time_s"] / row["forwards"]) / (base["wall_time_s"] / base["forwards"])
    accepted, base_accepted = row["tokens"] / row["forwards"], base["tokens"] / base["forwards"]
    text = (f"Why {decoder} is slower than ar here: its drafts cost cost(N) on this machine, one of its forwards "
            f"took {cost:.2f}x an ar forward, and each accepted {accepted:.2f} tokens per step "
            f"(ar {base_accepted:.2f}): "
            f"{accepted / base_accepted:.2f} / {cost:.2f} = {row['speedup']:.2f}x.")
    return f"<p class='ps-speed' style='margin:4px 0'>{html.escape(text)}</p>"


# -- the stats table --------------------------------------------------------------------------------

STAT_COLUMNS = (("decoder", "decoder"), ("guarantee", "guarantee"), ("tokens", "new tokens"),
                ("forwards", "forwards"), ("tokens_per_forward", "tokens / forward"), ("wall_time_s", "wall time (s)"),
                ("tokens_per_second", "tokens / s"), ("speedup", "speedup vs ar"))


def stats_row(decoder: str, stats: suite.DecodeStats, seconds: float, done: bool, tokens: int | None = None) -> dict:
    """One row of the table; `seconds` is the decoder's own time (see TimedIterator); `tokens`
    overrides what counts as one (e.g. codes rather than frames for speech). A reader that made no
    forward (a CTC head) has no tokens per forward."""
    tokens = stats.num_new_tokens if tokens is None else tokens
    forwards = stats.num_forwards
    return {"decoder": decoder, "tokens": tokens, "forwards": forwards,
            "tokens_per_forward": tokens / forwards if forwards else None, "wall_time_s": seconds,
            "tokens_per_second": tokens / seconds if seconds > 0 else 0.0, "done": done}


def add_speedups(rows: list[dict]) -> list[dict]:
    """Speedup over ar = a row's tokens/s divided by ar's (a ratio of rates, so runs that stop at
    different lengths still compare fairly); filled in once both runs are done."""
    base = next((r for r in rows if r["decoder"] == "ar"), None)
    for r in rows:
        ok = base is not None and base["done"] and r["done"] and base["tokens_per_second"] > 0
        r["speedup"] = r["tokens_per_second"] / base["tokens_per_second"] if ok else None
    return rows


def stats_table(rows: list[dict], note: str = "", guarantees: dict[str, str] | None = None) -> str:
    """HTML table; each cell carries data-stat so tests (and people with devtools) can read it. A
    running row shows dashes until its first result; `guarantees` maps decoder -> its guarantee."""
    head = "".join(f"<th style='text-align:left;padding:4px 10px'>{html.escape(label)}</th>"
                   for _, label in STAT_COLUMNS)
    body = []
    for r in rows:
        started = r["done"] or r["forwards"] > 0
        values = {**r, "guarantee": (guarantees or {}).get(r["decoder"])}
        cells = "".join(f"<td data-stat='{key}' style='padding:4px 10px'>"
                        f"{_fmt(key, values.get(key) if started or key in ('decoder', 'guarantee') else None)}</td>"
                        for key, _ in STAT_COLUMNS)
        state = "done" if r["done"] else "running"
        body.append(f"<tr data-decoder='{html.escape(r['decoder'])}' data-state='{state}'>{cells}</tr>")
    note_html = f"<p class='ps-note' style='margin:6px 0 0 0'>{html.escape(note)}</p>" if note else ""
    return (f"<table style='border-collapse:collapse;width:100%'>"
            f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>{note_html}")


def summary_html(rows: list[dict], modality: str, decoder: str, same: tuple[bool, str, bool] | None = None,
                 note: str = "", own: dict[str, Guarantee] | None = None, options: dict | None = None) -> str:
    """The result's whole account: the chosen decoder's guarantee (and measured quality cost), the
    stats table with each row's guarantee, whether the output equals ar's (`same` = (equal, what is
    compared, sampled), once both are done) and why a slower decoder is slower."""
    rows = add_speedups(rows)
    kinds = {r["decoder"]: guarantee_of(r["decoder"], own).kind for r in rows}
    parts = [guarantee_html(decoder, modality, own, options), stats_table(rows, note, kinds)]
    if same is not None:
        parts.append(same_html(same[0], same[1], decoder, guarantee_of(decoder, own), same[2]))
    parts.append(speed_html(rows, decoder))
    return f"<div class='ps-stats'>{''.join(parts)}</div>"


def _fmt(key: str, value) -> str:
    if value is None:
        return "–"
    if key in ("decoder", "guarantee"):
        return html.escape(str(value))
    if key == "speedup":
        return f"{value:.2f}x"
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)
