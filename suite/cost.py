"""Cost-aware draft sizing: what a forward over N new tokens costs on this machine, how often a
request's drafts are accepted, and the draft size that maximises expected tokens per second.

Parallelism is not free on a CPU (a forward over 8 new tokens costs about 1.8 one-token forwards
for SmolLM2 here), so a draft pays only where its expected accepted length beats its cost. Each
drafting decoder asks `best_size` for the step's draft size: 0 means a plain one-token step.

  * `forward_cost(adapter)`: the curve cost(N), seconds of one forward over N new tokens after a
    few hundred cached ones, measured once per model, dtype, device and machine (a few seconds) and
    cached on disk under the cache folder (`refresh=True` measures again);
  * `AcceptanceRates`: running, decaying estimates of a request's conditional acceptance rate at
    each draft depth (a Beta prior, so a fresh request starts hopeful but not certain);
  * `best_size`: argmax over n of expected committed tokens / expected step time.
"""
from __future__ import annotations

import hashlib
import math
import os
import platform
import time
from dataclasses import dataclass

import torch

from .loop import Draft, forward_mask

WIDTHS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
_MEMORY: dict[str, "CostCurve"] = {}


@dataclass(frozen=True)
class CostCurve:
    """Seconds of one target forward over n new tokens (batch 1), piecewise linear in n."""

    widths: tuple[int, ...]
    seconds: tuple[float, ...]

    def __call__(self, n: float) -> float:
        w, s = self.widths, self.seconds
        if n <= w[0]:
            return s[0]
        for i in range(1, len(w)):
            if n <= w[i]:
                return s[i - 1] + (s[i] - s[i - 1]) * (n - w[i - 1]) / (w[i] - w[i - 1])
        slope = (s[-1] - s[-2]) / (w[-1] - w[-2])
        return s[-1] + slope * (n - w[-1])

    def relative(self, n: float) -> float:
        """cost(n) / cost(1)."""
        return self(n) / self.seconds[0]

    def step(self, batch: int, width: int) -> float:
        """A forward over `batch` rows of `width` slots, as one over batch*width slots."""
        return self(batch * width)


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _key(adapter, masked: bool) -> str:
    """The cache key of an adapter's curve: what the adapter says its forwards' cost depends on
    (`cost_identity`, declared with `capabilities.cost_model`), the machine and torch."""
    device = torch.device(adapter.device)
    if device.type == "cuda":
        machine = torch.cuda.get_device_name(device)
    else:
        machine = f"{_cpu_name()} x{torch.get_num_threads()}"
    parts = [*adapter.cost_identity(), machine, torch.__version__, "masked" if masked else "causal"]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class FixedStepCurve(CostCurve):
    """The cost of a model whose every step scores `width` slots a row (suite.loop.step_width): a step
    costs the same whatever it holds, up to `width` slots; a wider one is not run. Sizing over it fills
    a row's slots with the drafts it has and never asks for more."""

    width: int = 1

    def __call__(self, n: float) -> float:
        return self.seconds[0] if n <= self.width else math.inf

    def step(self, batch: int, width: int) -> float:
        return batch * self(width)


def fixed_step_curve(adapter, width: int) -> FixedStepCurve:
    """The fixed-step curve of `adapter` at `width` slots: the measured masked forward of that width."""
    seconds = forward_cost(adapter, masked=True)(width)
    return FixedStepCurve((width,), (seconds,), width)


def forward_cost(adapter, masked: bool = False, refresh: bool = False, context: int = 256,
                 widths: tuple[int, ...] = WIDTHS, repeats: int = 3) -> CostCurve:
    """The adapter's cost curve (see the module doc). masked=True measures forwards with a custom
    attention mask (trees, lookahead), which take a slower attention path than plain causal ones."""
    from .runtime.storage import cache_dir, read_json, write_json
    key = _key(adapter, masked)
    if not refresh and key in _MEMORY:
        return _MEMORY[key]
    path = cache_dir("cost", f"{key}.json")
    data = None if refresh else read_json(path, default=None)
    if not (isinstance(data, dict) and data.get("widths") and data.get("seconds")):
        widths, context = _fit(adapter, widths, context)
        data = {"widths": list(widths), "seconds": _measure(adapter, masked, context, widths, repeats),
                "context": context, "threads": torch.get_num_threads(), "measured": time.strftime("%Y-%m-%d %H:%M")}
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_json(path, data)
        except OSError:   # a read-only cache folder: keep the curve for this process only
            pass
    curve = CostCurve(tuple(data["widths"]), tuple(data["seconds"]))
    _MEMORY[key] = curve
    return curve


def measure_curve(adapter, masked: bool = False, context: int = 256, widths: tuple[int, ...] = WIDTHS,
                  repeats: int = 3, clock=time.perf_counter) -> CostCurve:
    """The cost curve measured now, uncached (benchmarks: cost(N)/cost(1) at a given context).
    clock=time.process_time counts the process's CPU time, robust to other load on a shared CPU
    when torch runs one thread."""
    widths, context = _fit(adapter, widths, context)
    return CostCurve(tuple(widths), tuple(_measure(adapter, masked, context, widths, repeats, clock)))


def _fit(adapter, widths, context: int) -> tuple[tuple[int, ...], int]:
    """The widths and context a measurement fits in the adapter's context (`config.max_length`, a
    static cache's slots): widths that leave no room for a cached token are dropped (a decoder never
    drafts past the room left either), the context shrinks so the widest forward fits behind it."""
    limit = adapter.config.max_length
    if limit is None:
        return tuple(widths), context
    widths = tuple(w for w in widths if w < limit) or (1,)
    return widths, max(1, min(context, limit - max(widths)))


@torch.no_grad()
def _measure(adapter, masked: bool, context: int, widths, repeats: int, clock=time.perf_counter) -> list[float]:
    """Median seconds of a forward over n new tokens after `context` cached ones, for each n."""
    vocab = adapter.config.vocab_size
    cache = adapter.new_cache(1)
    dev = cache.valid.device                    # the adapter's device
    gen = torch.Generator(device=dev).manual_seed(0)
    tokens = torch.randint(vocab, (1, context), generator=gen, device=dev)
    positions = torch.arange(context, device=dev)[None]
    causal = torch.ones(1, context, context, dtype=torch.bool, device=dev).tril()
    prefill = Draft(tokens, positions, causal, torch.ones(1, context, dtype=torch.bool, device=dev), causal=True)
    adapter(tokens, positions, cache, forward_mask(adapter, cache, prefill), logits_from=context - 1)
    cache.append(positions, prefill.valid, dense=True)
    seconds = []
    for n in widths:
        times = []
        for _ in range(repeats + 1):     # the first run of a width warms it up
            pos = torch.arange(context, context + n, device=dev)[None]
            own = torch.ones(1, n, n, dtype=torch.bool, device=dev).tril()
            if masked and n > 1:
                own[:, 1:, 0] = False      # not plain causal: the attention takes the masked path
            draft = Draft(torch.randint(vocab, (1, n), generator=gen, device=dev), pos, own,
                          torch.ones(1, n, dtype=torch.bool, device=dev), causal=not (masked and n > 1))
            mask = forward_mask(adapter, cache, draft)
            t0 = clock()
            adapter(draft.tokens, pos, cache, mask)
            _sync(adapter)
            times.append(clock() - t0)
            slots = cache.append(pos, draft.valid)
            dead = torch.zeros_like(cache.valid)
            dead[:, slots] = True
            cache.discard(dead)
            cache.compact()
        seconds.append(sorted(times[1:])[len(times[1:]) // 2])
    for i in range(1, len(seconds)):   # a wider forward never costs less (timing noise)
        seconds[i] = max(seconds[i], seconds[i - 1])
    return seconds


def _sync(adapter) -> None:
    if torch.device(adapter.device).type == "cuda":
        torch.cuda.synchronize(adapter.device)


class AcceptanceRates:
    """alpha(i): the chance that draft token i is accepted given tokens < i were, from decayed
    counts on top of a Beta prior of weight `strength` whose mean is alpha(i - 1) (`prior` at
    depth 0): a depth never tried is as likely as the deepest one tried, so a request whose drafts
    are all accepted (copying from its input) tries longer ones, and one whose drafts fail does
    not. `update(drafted, accepted)` after each verification."""

    def __init__(self, depth: int, prior: float = 0.5, strength: float = 2.0, decay: float = 0.95):
        self.hits, self.tries = [0.0] * depth, [0.0] * depth
        self.prior, self.strength, self.decay = prior, strength, decay
        self.used = 0     # depths ever tried: the counts past them are zero, decaying them is a no-op

    def update(self, drafted: int, accepted: int) -> None:
        self.used = max(self.used, min(drafted, accepted + 1, len(self.hits)))
        for i in range(self.used):
            self.hits[i] *= self.decay
            self.tries[i] *= self.decay
        for i in range(min(drafted, accepted + 1, len(self.hits))):
            self.tries[i] += 1.0
            self.hits[i] += float(i < accepted)

    def alphas(self, n: int) -> list[float]:
        """alpha(0) .. alpha(n - 1)."""
        out, mean = [], self.prior
        for i in range(n):
            j = min(i, len(self.hits) - 1)
            mean = (self.hits[j] + mean * self.strength) / (self.tries[j] + self.strength)
            out.append(mean)
        return out

    def alpha(self, i: int) -> float:
        return self.alphas(i + 1)[-1]

    def gains(self, n_max: int) -> list[float]:
        """Expected accepted drafts out of a chain of n, for n = 0..n_max."""
        out, total, chain = [0.0], 0.0, 1.0
        for a in self.alphas(n_max):
            chain *= a
            total += chain
            out.append(total)
        return out


def best_size(gains: list[list[float]], curve: CostCurve, pending: int = 1,
              draft_seconds=None) -> int:
    """The common draft size n (0 = a plain step) that maximises the expected progress per second
    of a batch: gains[b][n] is row b's expected accepted drafts with n drafted (non-decreasing in
    n, one entry per n the row may take); each row commits 1 + gains[b][n] tokens per step of cost
    curve(B * (pending + n)) + draft_seconds(n), so drafting turns itself down as the batch grows.
    Progress is the least of the rows' (B rows each as slow as that one), so one row whose drafts
    fail keeps the batch on plain steps rather than paying for drafts that save no forward. (Rows
    that leave as they finish, suite.scheduler, would suggest their sum; measured on 12 chat prompts
    it drafted where acceptance did not pay: ngram 0.60x, jacobi 0.56x the least-row rule's tok/s.)"""
    rows = len(gains)
    if not rows:
        return 0
    n_max = max(len(g) for g in gains) - 1
    best, best_rate = 0, -1.0
    for n in range(n_max + 1):
        tokens = rows * min(1 + g[min(n, len(g) - 1)] for g in gains)
        seconds = curve.step(rows, pending + n) + (draft_seconds(n) if draft_seconds is not None and n else 0.0)
        rate = tokens / seconds
        if rate > best_rate * (1 + 1e-9):
            best, best_rate = n, rate
    return best


def batch_progress(committed: list[list[int]]) -> float:
    """A step's progress as `best_size` counts it: the rows that committed, times the least any of
    them committed."""
    lengths = [len(c) for c in committed if c]
    return len(lengths) * min(lengths) if lengths else 0.0


class RunningMean:
    """A decaying mean with a prior (`prior` worth `strength` observations): after a run of bad
    news it drifts back toward the prior, so a decoder that stopped drafting tries again."""

    def __init__(self, prior: float, strength: float = 2.0, decay: float = 0.9):
        self.total, self.count = 0.0, 0.0
        self.prior, self.strength, self.decay = prior, strength, decay

    def add(self, x: float | None) -> None:
        """One step: decay, then count x (None: a step without an observation)."""
        self.total *= self.decay
        self.count *= self.decay
        if x is not None:
            self.total += x
            self.count += 1.0

    @property
    def value(self) -> float:
        return (self.total + self.prior * self.strength) / (self.count + self.strength)


def chain_sizes(state, curve: CostCurve | None, available: list[int], prior: float = 0.5,
                draft_seconds=None) -> list[int]:
    """Each row's chain draft length: `available[b]` (what its drafter offers) cut to the common
    size that maximises the batch's expected tokens per second under the rows' running acceptance
    rates (each row of the decoder has a `rates` field, an AcceptanceRates made here on first use;
    `record` updates them). curve None: `available` unchanged (fixed sizes)."""
    if curve is None:
        return list(available)
    active = [b for b in range(state.batch) if not state.done[b]]
    for b in active:
        if state.rows[b].rates is None:
            state.rows[b].rates = AcceptanceRates(64, prior)
    n = best_size([state.rows[b].rates.gains(min(available[b], 64)) for b in active], curve,
                  draft_seconds=draft_seconds)
    return [min(a, n) for a in available]


def record(state, drafted: list[int], accepted: list[int]) -> None:
    """After a verification: row b drafted `drafted[b]` tokens and `accepted[b]` of them were kept."""
    for b in range(state.batch):
        if not state.done[b] and state.rows[b].rates is not None:
            state.rows[b].rates.update(drafted[b], accepted[b])


def weight_count(module) -> int | None:
    """The parameters a forward of `module` (or of an adapter's model) reads, each shared tensor once; None
    for a model that is no torch module (a llama.cpp file)."""
    module = getattr(module, "model", module)
    return sum(p.numel() for p in module.parameters()) if hasattr(module, "parameters") else None


def weight_share(drafter, target, extra: int = 0, unknown: float = 0.5) -> float:
    """A drafter's one-token forward priced in target forwards: the share of the target's weights it reads
    (`extra`: weights it reads beyond its parameters), for such a forward is bound by its weight reads on a
    CPU, and on a GPU at small batch; `unknown` where either is no torch module. A fixed price, not a clock:
    a decoder that sizes its drafts by it takes the same steps on every run."""
    mine, theirs = weight_count(drafter), weight_count(target)
    return unknown if not mine or not theirs else (mine + extra) / theirs


def bind_cost(decoder, model, masked: bool = False):
    """`decoder` with its `cost` option resolved against the target: "auto" becomes the model's
    measured curve where its adapter declares `capabilities.cost_model` (else None: fixed sizes);
    PARASUITE_COST=0 turns sizing off everywhere. A decoder's `bind` calls this."""
    from dataclasses import replace

    from .models.adapters import as_adapter
    if not isinstance(decoder.cost, str):
        return decoder
    if decoder.cost != "auto":
        raise ValueError(f"cost must be 'auto', None or a suite.cost.CostCurve, got {decoder.cost!r}")
    return replace(decoder, cost=target_curve(as_adapter(model), masked))


def target_curve(adapter, masked: bool = False) -> CostCurve | None:
    """The adapter's measured curve where it declares `capabilities.cost_model`, else None;
    PARASUITE_COST=0: None everywhere."""
    use = adapter.capabilities.cost_model and os.environ.get("PARASUITE_COST", "1") != "0"
    if not use:
        return None
    width = adapter.capabilities.step_width
    return fixed_step_curve(adapter, width) if width else forward_cost(adapter, masked)


__all__ = ["AcceptanceRates", "CostCurve", "FixedStepCurve", "RunningMean", "batch_progress", "best_size", "bind_cost",
           "chain_sizes", "fixed_step_curve", "forward_cost", "measure_curve", "record", "target_curve", "weight_count",
           "weight_share"]
