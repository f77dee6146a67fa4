"""Serving benchmark: the OpenAI-compatible server (`python -m apps.serve`) under concurrent clients over
loopback, against the same requests sent one at a time and against the server with the prefix cache off.

    python -m text.bench_serving                              # every scenario, 8 clients
    python -m text.bench_serving --scenario concurrent --clients 8 --max-tokens 32
    python -m text.bench_serving --scenario system --arrival poisson --rate 2
    python -m text.bench_serving --model DIR --decoder ngram

Scenarios (greedy, so every answer can be checked against its serial one):
  concurrent  distinct questions: N clients at once against the same requests in a row (prefix cache off)
  chat        a multi-turn chat whose history grows to ~800 tokens: time to first token of each turn,
              prefix cache on against off
  system      requests sharing a ~500-token system prompt from N clients: total time, cache on against off
Each reports throughput (completion tokens/s), time to first token p50/p99 and time per output token.
Two servers run (cache on, cache off) as subprocesses on free loopback ports; the scenarios alternate
between them in one run, so their ratios share the machine's conditions. Counts and times are bounded
(--requests, --max-tokens, --timeout).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

QUESTIONS = ["What is the capital of France?", "Name three primary colours.", "How many legs does a spider have?",
             "What is 12 times 7?", "Give a synonym for happy.", "What does a thermometer measure?",
             "Which planet is closest to the sun?", "What is the boiling point of water in Celsius?",
             "Name a mammal that can fly.", "What language is spoken in Brazil?", "What is H2O?",
             "How many days are in a leap year?", "Who wrote Romeo and Juliet?", "What is the largest ocean?",
             "What colour is chlorophyll?", "What is the square root of 81?"]
NOTES = ["The library opens at nine and closes at six on weekdays; on Saturdays it closes at two, and it is "
         "closed on Sundays and public holidays. Members may borrow up to eight books for three weeks, renew "
         "them twice online, and reserve titles that are out. Late returns cost twenty cents a day per book.",
         "Our team moved the weekly planning meeting from Monday to Tuesday morning because two engineers work "
         "remotely on Mondays. The agenda stays the same: last week's results, blockers, the next release date "
         "and any hiring news. Notes go to the shared folder within an hour of the meeting ending.",
         "The recipe needs two cups of flour, one teaspoon of baking soda, a pinch of salt, half a cup of butter, "
         "three quarters of a cup of sugar, two eggs and three ripe bananas. Bake it for about an hour at one "
         "hundred and seventy degrees, then let it cool for ten minutes before slicing.",
         "The train to the coast leaves every forty minutes from platform four. Tickets bought on board cost "
         "more than those from the machines, and bicycles travel free outside rush hours. The journey takes "
         "ninety minutes with three stops, and the last train back leaves the coast at eleven at night.",
         "The garden club meets on the first Thursday of each month in the community hall. Members share "
         "seeds in spring, swap cuttings in summer and hold a vegetable show in early autumn. New members pay "
         "a small yearly fee that covers the hall, tea and the club's shared tools."]


def system_prompt(words: int = 380) -> str:
    """A support assistant's policies, ~500 tokens."""
    topics = ["refunds", "shipping", "warranty", "accounts", "privacy", "returns", "support hours", "billing",
              "discounts", "repairs", "deliveries", "gift cards"]
    lines, n, i = ["You are the support assistant of Parasuite Tools. Follow these policies exactly."], 0, 0
    while n < words:
        t = topics[i % len(topics)]
        line = (f"Policy {i + 1} on {t}: answer questions about {t} politely and briefly, quote the relevant "
                f"rule, never promise anything the rule does not say, and offer to connect the customer with a "
                f"human agent when the question about {t} is unusual.")
        lines.append(line)
        n += len(line.split())
        i += 1
    return "\n".join(lines)


@dataclass
class Call:
    text: str = ""
    ttft: float = 0.0            # seconds to the first content
    total: float = 0.0
    usage: dict = field(default_factory=dict)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    """`python -m apps.serve` on a free loopback port."""

    def __init__(self, model: str | None, prefix_cache_mb: int, dtype: str | None, timeout: float):
        self.port = free_port()
        cmd = [sys.executable, "-m", "apps.serve", "--port", str(self.port), "--prefix-cache-mb", str(prefix_cache_mb),
               "--max-queue", "256"]
        if model:
            cmd += ["--model", model]
        if dtype:
            cmd += ["--dtype", dtype]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
        self.url = f"http://127.0.0.1:{self.port}/v1"
        import httpx
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"the server exited with code {self.proc.returncode}")
            try:
                if httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.5)
        else:
            self.close()
            raise SystemExit("the server did not start in time")
        self.model = httpx.get(f"{self.url}/models").json()["data"][0]["id"]

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def chat(server: ServerProcess, messages: list[dict], args, timeout: float) -> Call:
    """One streamed chat call: its text, time to first token, total time and usage."""
    import httpx
    body = {"model": server.model, "messages": messages, "temperature": 0, "max_tokens": args.max_tokens,
            "stream": True, "stream_options": {"include_usage": True}, "decoder": args.decoder}
    call, t0 = Call(), time.perf_counter()
    with httpx.stream("POST", f"{server.url}/chat/completions", json=body, timeout=timeout) as r:
        if r.status_code != 200:
            raise SystemExit(f"the server answered {r.status_code}: {r.read().decode()[:300]}")
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            data = json.loads(line[6:])
            if "error" in data:
                raise SystemExit(f"the server failed a request: {data['error']['message']}")
            if data.get("usage"):
                call.usage = data["usage"]
            for choice in data.get("choices", []):
                piece = choice.get("delta", {}).get("content")
                if piece:
                    if not call.text:
                        call.ttft = time.perf_counter() - t0
                    call.text += piece
    call.total = time.perf_counter() - t0
    return call


def run_clients(server, conversations: list[list[dict]], args, clients: int) -> tuple[list[Call], float]:
    """Send each conversation once from `clients` client threads (closed loop, or Poisson arrivals at
    --rate a second); (calls in order, wall seconds)."""
    random.seed(0)
    starts, t = [], 0.0
    for _ in conversations:
        starts.append(t)
        t += random.expovariate(args.rate) if args.arrival == "poisson" else 0.0
    t0 = time.perf_counter()

    def one(i):
        if args.arrival == "poisson":
            time.sleep(max(0.0, t0 + starts[i] - time.perf_counter()))
        return chat(server, conversations[i], args, args.timeout)

    with ThreadPoolExecutor(clients) as pool:
        calls = list(pool.map(one, range(len(conversations))))
    return calls, time.perf_counter() - t0


def summary(calls: list[Call], seconds: float) -> dict:
    tokens = sum(c.usage.get("completion_tokens", 0) for c in calls)
    ttfts = sorted(c.ttft for c in calls if c.text)
    tpot = [(c.total - c.ttft) / max(c.usage.get("completion_tokens", 1) - 1, 1) for c in calls if c.text]
    pct = lambda q: ttfts[min(len(ttfts) - 1, int(q * len(ttfts)))] if ttfts else 0.0   # noqa: E731
    cached = sum(c.usage.get("prompt_tokens_details", {}).get("cached_tokens", 0) for c in calls)
    forwards = sum(c.usage.get("forwards", 0) for c in calls)
    return {"seconds": seconds, "tok_s": tokens / seconds if seconds else 0.0, "ttft_p50": pct(0.5), "ttft_p99": pct(0.99),
            "tpot": statistics.mean(tpot) if tpot else 0.0, "tokens": tokens, "cached": cached, "forwards": forwards}


def row(name: str, s: dict, base: dict | None, equal: str = "") -> str:
    ratio = f"{s['seconds'] / base['seconds']:.2f}x" if base else "1.00x"
    return (f"| {name} | {s['seconds']:.1f} | {ratio} | {s['tok_s']:.1f} | {s['ttft_p50']:.2f} | {s['ttft_p99']:.2f} "
            f"| {s['tpot'] * 1000:.0f} | {s['cached']} | {equal} |")


HEADER = ("| run | seconds | time vs first row | tokens/s | TTFT p50 s | TTFT p99 s | ms/output token | cached prompt "
          "tokens | answers equal to serial |\n|---|---|---|---|---|---|---|---|---|")


def scenario_concurrent(on, off, args) -> None:
    convs = [[{"role": "user", "content": QUESTIONS[i % len(QUESTIONS)]}] for i in range(args.requests)]
    print(f"\n### {args.requests} distinct questions, {args.clients} clients, prefix cache off\n")
    print(HEADER)
    for decoder in args.decoders:
        one = argparse.Namespace(**{**vars(args), "decoder": decoder})
        t0 = time.perf_counter()
        serial = [chat(off, c, one, args.timeout) for c in convs]
        base = summary(serial, time.perf_counter() - t0)
        calls, seconds = run_clients(off, convs, one, args.clients)
        s = summary(calls, seconds)
        equal = sum(a.text == b.text for a, b in zip(serial, calls))
        print(row(f"{decoder}: serial (one at a time)", base, None))
        print(row(f"{decoder}: {args.clients} concurrent clients ({args.arrival})", s, base, f"{equal}/{len(convs)}"))


def scenario_chat(on, off, args) -> None:
    print(f"\n### a {args.turns}-turn chat, decoder {args.decoder}: time to first token per turn\n")
    print("| turn | prompt tokens | TTFT cache off s | TTFT cache on s | on/off | cached tokens | same answer |")
    print("|---|---|---|---|---|---|---|")
    hist = {on: [], off: []}
    ratios = []
    for turn in range(args.turns):
        notes = "\n".join(NOTES[(turn + i) % len(NOTES)] for i in range(args.notes))
        user = {"role": "user", "content": f"Here are some notes:\n{notes}\nSummarise them in one sentence."}
        calls = {}
        for server in (off, on):
            hist[server].append(user)
            calls[server] = chat(server, hist[server], args, args.timeout)
            hist[server].append({"role": "assistant", "content": calls[server].text})
        a, b = calls[off], calls[on]
        ratio = b.ttft / a.ttft if a.ttft else 0.0
        if turn:
            ratios.append(ratio)
        print(f"| {turn + 1} | {b.usage.get('prompt_tokens', 0)} | {a.ttft:.2f} | {b.ttft:.2f} | {ratio:.2f} | "
              f"{b.usage.get('prompt_tokens_details', {}).get('cached_tokens', 0)} | {a.text == b.text} |")
    if ratios:
        print(f"\nturns 2-{args.turns}: TTFT with the prefix cache {statistics.mean(ratios):.2f}x without it (mean of ratios)")


def scenario_system(on, off, args) -> None:
    sys_prompt = system_prompt()
    convs = [[{"role": "system", "content": sys_prompt}, {"role": "user", "content": QUESTIONS[i % len(QUESTIONS)]}]
             for i in range(args.system_requests)]
    results = {}
    for server in (off, on):
        results[server] = run_clients(server, convs, args, args.clients)
    base = summary(*results[off])
    s = summary(*results[on])
    equal = sum(a.text == b.text for a, b in zip(results[off][0], results[on][0]))
    prompt = results[on][0][0].usage.get("prompt_tokens", 0)
    print(f"\n### {args.system_requests} requests sharing a {prompt}-token prompt prefix (system prompt), "
          f"{args.clients} clients ({args.arrival}), decoder {args.decoder}\n")
    print(HEADER)
    print(row("prefix cache off", base, None))
    print(row("prefix cache on", s, base, f"{equal}/{len(convs)} (vs cache off)"))


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m text.bench_serving", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__[__doc__.index("    python"):__doc__.index("Scenarios")])
    p.add_argument("--model", help="a local model folder (default: the embedded SmolLM2)")
    p.add_argument("--dtype", default=None)
    p.add_argument("--scenario", choices=["all", "concurrent", "chat", "system"], default="all")
    p.add_argument("--clients", type=int, default=8, help="concurrent clients (default 8)")
    p.add_argument("--requests", type=int, default=8, help="questions of the concurrent scenario (default 8)")
    p.add_argument("--system-requests", type=int, default=16, help="requests of the system scenario (default 16)")
    p.add_argument("--turns", type=int, default=5, help="turns of the chat scenario (default 5)")
    p.add_argument("--notes", type=int, default=2, help="notes (~70 tokens each) in each chat turn (default 2)")
    p.add_argument("--max-tokens", type=int, default=32, help="tokens per answer at most (default 32)")
    p.add_argument("--decoder", default="auto", help="the decoder (a comma list: each in the concurrent scenario, "
                                                     "the first in the others)")
    p.add_argument("--arrival", choices=["closed", "poisson"], default="closed",
                   help="closed: every client sends its next request when its last one ends; poisson: at --rate")
    p.add_argument("--rate", type=float, default=2.0, help="Poisson arrivals a second (default 2)")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds a request (and a server start) may take")
    args = p.parse_args(argv)
    args.decoders = [d for d in args.decoder.split(",") if d]
    args.decoder = args.decoders[0]
    if args.clients < 1 or args.requests < 1 or args.turns < 1 or args.max_tokens < 1 or args.rate <= 0:
        p.error("--clients, --requests, --turns, --max-tokens and --rate must be positive")
    on = ServerProcess(args.model, 512, args.dtype, args.timeout)
    try:
        off = ServerProcess(args.model, 0, args.dtype, args.timeout)
    except BaseException:
        on.close()
        raise
    try:
        for server in (on, off):                       # warm up: the decoder's first bind, the cost curve
            chat(server, [{"role": "user", "content": "Hello."}], args, args.timeout)
        print(f"model {on.model}; {os.cpu_count()} CPUs; torch threads as the server picks; "
              f"every request greedy, max_tokens {args.max_tokens}")
        for name in (["concurrent", "chat", "system"] if args.scenario == "all" else [args.scenario]):
            {"concurrent": scenario_concurrent, "chat": scenario_chat, "system": scenario_system}[name](on, off, args)
            sys.stdout.flush()
    finally:
        on.close()
        off.close()


if __name__ == "__main__":
    main()
