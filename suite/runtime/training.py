"""The timed training loop's parts, shared by every `train` entry point: a budget in steps and
minutes, warmup + cosine learning rate, the optimizer step, resumable counters, log and progress.

torch and tqdm load on first use (importing this module stays light).
"""
from __future__ import annotations

import math
import os
import sys
import time

from .storage import read_json


class Budget:
    """A run's budget: `steps` steps and/or `minutes` of `clock` (None or 0: no limit of that
    kind), counted from construction. `minutes_before`: minutes of earlier runs that the
    schedule's clock counts too (a resumed run continues the cosine where it stopped).
    `clock=time.process_time` (see `cpu_budget`) counts this process's CPU time: on a shared CPU
    the wall clock overstates the compute a run got."""

    def __init__(self, minutes: float | None = None, steps: int | None = None, minutes_before: float = 0.0,
                 clock=time.time):
        self.minutes, self.steps, self.minutes_before, self.clock = minutes, steps, minutes_before, clock
        self.start = clock()

    @property
    def elapsed_s(self) -> float:
        return self.clock() - self.start

    def progress(self, step: int = 0) -> float:
        """How much of the budget `step` steps and the clock have used (by steps or by time,
        whichever is further; 1.0 and more: spent)."""
        by_steps = step / self.steps if self.steps else 0.0
        if not self.minutes:
            return by_steps
        by_time = (60 * self.minutes_before + self.elapsed_s) / (60 * (self.minutes_before + self.minutes))
        return max(by_steps, by_time)

    def spent(self, step: int = 0) -> bool:
        return self.progress(step) >= 1.0

    def over(self, step: int) -> bool:
        """`spent(step)`, logged ("time budget reached at step N") when it is."""
        if self.spent(step):
            log(f"time budget reached at step {step}")
            return True
        return False


def cpu_budget(minutes: float | None, steps: int | None = None, minutes_before: float = 0.0,
               device: str = "cpu") -> Budget:
    """The budget a training on `device` runs on: CPU minutes of this process on a CPU (a
    shared CPU's wall clock runs ahead of the compute), wall minutes elsewhere."""
    return Budget(minutes, steps, minutes_before, time.process_time if device == "cpu" else time.time)


def warmup_cosine(base: float, step: int, progress: float, warmup: int = 0, floor: float = 0.05) -> float:
    """The learning rate at `step`: a linear warmup over the first `warmup` steps, times a cosine
    from `base` down to `floor * base` as `progress` goes from 0 to 1 (clamped)."""
    ramp = min(1.0, (step + 1) / warmup) if warmup else 1.0
    return base * ramp * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0))))


def set_learning_rate(opt, lr: float) -> float:
    """Set every parameter group's lr to `lr` times the group's "scale" (default 1); returns lr."""
    for group in opt.param_groups:
        group["lr"] = lr * group.get("scale", 1.0)
    return lr


def optimizer_step(opt, loss, params=None, clip: float | None = 1.0) -> None:
    """One update: zero the gradients, backpropagate `loss`, clip the gradient norm of `params`
    (default: the optimizer's parameters; clip None: no clipping), step."""
    import torch
    opt.zero_grad()
    loss.backward()
    if clip is not None:
        if params is None:
            params = [p for group in opt.param_groups for p in group["params"]]
        torch.nn.utils.clip_grad_norm_(params, clip)
    opt.step()


def training_device(name: str, tf32: bool = True):
    """The torch device to train on; a GPU fails early when there is none and, with `tf32`, gets
    TF32 matmuls (the weights stay fp32)."""
    import torch
    if name.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ValueError("--device cuda needs a CUDA GPU; use --device cpu")
        if tf32:
            torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    return torch.device(name)


def previous_metrics(folder: str | os.PathLike) -> dict:
    """The metrics.json of an earlier run in `folder` (its "steps", "train_minutes", ...), {} if none."""
    metrics = read_json(os.path.join(folder, "metrics.json"), default={})
    return metrics if isinstance(metrics, dict) else {}


def exit_status(run, *args) -> int:
    """A command line's exit status: 0 once `run(*args)` returns; a ValueError (bad input, its
    message naming the fix) prints "error: <message>" on stderr and gives 2."""
    try:
        run(*args)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


def log(message: str) -> None:
    """A training log line on stdout, flushed (logs are read while the run goes on)."""
    print(message, flush=True)


class ClockBar:
    """A progress bar over a budget of seconds on stderr: `show(elapsed_s, status)` moves it to
    the elapsed seconds with a status line (losses, step)."""

    def __init__(self, total_s: float, desc: str):
        from tqdm import tqdm
        self.bar = tqdm(total=int(total_s), desc=desc, unit="s", file=sys.stderr,
                        bar_format="{desc}: {n_fmt}/{total_fmt}s {postfix}")

    def show(self, elapsed_s: float, status: str) -> None:
        self.bar.n = int(elapsed_s)
        self.bar.set_postfix_str(status)
        self.bar.refresh()

    def close(self) -> None:
        self.bar.close()
