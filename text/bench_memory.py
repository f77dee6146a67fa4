"""`python -m text.bench --memory`: the resident memory a GGUF file costs on the llama.cpp engine, per file type.

Each type runs in a fresh process (Linux: /proc/self/status): its baseline is Python with torch, suite, text and
llama_cpp imported (what any process of this suite holds before a model: torch alone is about 490 MiB here); then
`text.load(path, engine="llama.cpp")`; then one chat generate of `--max-new-tokens`. Reported: the resident set
(VmRSS) added over the baseline and its ratio to the file's size (the issue's target: at most 1.5x), split into
anonymous memory (llama.cpp's K/V, buffers, Python objects) and file pages (the weights llama.cpp maps from the
file, and code pages of libraries the first forward touches). Last, what a second model of the same file adds once it
has answered too, in the same process: the file's own cost, without the modules and code pages the first request
brought in. The GGUFs are the embedded SmolLM2 requantized (text.gguf_quantize).

    python -m text.bench --memory
    python -m text.bench --memory --types Q8_0 Q4_K_M F32 --max-new-tokens 32
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

PROMPT = "Write a short note about the sea."


def rss() -> dict[str, float]:
    """VmRSS, RssAnon and RssFile of this process in MiB."""
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "RssAnon", "RssFile"):
                out[key] = int(value.split()[0]) / 1024
    return out


def child(path: str, max_new_tokens: int, threads: int) -> dict:
    """In a fresh process: the stages' resident memory (MiB)."""
    import torch
    torch.set_num_threads(threads)
    import suite  # noqa: F401
    import text
    from suite.models.llama_cpp import import_llama_cpp
    import_llama_cpp()
    stages = {"baseline": rss()}
    gen = text.load(path, engine="llama.cpp")
    stages["load"] = rss()
    gen.generate(PROMPT, chat=True, max_new_tokens=max_new_tokens)
    stages["generate"] = rss()
    again = text.load(path, engine="llama.cpp")    # a second model of the file: no one-time imports left to pay
    again.generate(PROMPT, chat=True, max_new_tokens=max_new_tokens)
    stages["second"] = rss()
    return stages


def measure(kind: str, max_new_tokens: int, threads: int) -> tuple[int, dict]:
    from text.gguf_quantize import embedded_gguf
    path = embedded_gguf(kind)
    code = ("import json, sys; from text.bench_memory import child; "
            f"print('STAGES', json.dumps(child({str(path)!r}, {max_new_tokens}, {threads})))")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in [os.getcwd(), os.environ.get("PYTHONPATH")] if p))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False)
    line = next((x for x in done.stdout.splitlines() if x.startswith("STAGES ")), None)
    if done.returncode != 0 or line is None:
        raise RuntimeError(f"the memory run of {kind} failed:\n{done.stderr[-2000:]}")
    return path.stat().st_size, json.loads(line[len("STAGES "):])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m text.bench --memory", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--types", nargs="+", default=["Q8_0", "Q4_K_M", "F32"], metavar="TYPE",
                   help="GGUF types of the embedded model (text.gguf_quantize)")
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    if not sys.platform.startswith("linux"):
        p.error("--memory reads /proc/self/status: Linux only")
    lines = [f"Command: `python -m text.bench --memory {' '.join(argv if argv is not None else sys.argv[1:])}`; "
             "MiB; the baseline is a fresh process with torch, suite, text and llama_cpp imported.", "",
             "| file | size | baseline | + after text.load | x file | + after one generate (anon / file pages) "
             "| x file | + a second model of the file, after a generate | x file |",
             "|---|---|---|---|---|---|---|---|---|"]
    for kind in args.types:
        size, st = measure(kind, args.max_new_tokens, args.threads)
        mib = size / 2 ** 20
        base = st["baseline"]
        load = st["load"]["VmRSS"] - base["VmRSS"]
        gen = st["generate"]["VmRSS"] - base["VmRSS"]
        anon = st["generate"]["RssAnon"] - base["RssAnon"]
        pages = st["generate"]["RssFile"] - base["RssFile"]
        second = st["second"]["VmRSS"] - st["generate"]["VmRSS"]
        lines.append(f"| {kind} | {mib:.0f} | {base['VmRSS']:.0f} | {load:.0f} | {load / mib:.2f}x | {gen:.0f} "
                     f"({anon:.0f} / {pages:.0f}) | {gen / mib:.2f}x | {second:.0f} | {second / mib:.2f}x |")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
