"""Concurrent users of the Text tab, as a person's browser sends them (gradio_client, the /generate
endpoint): the same prompts one at a time, then all at once, per decoder, in one run.

    python scripts/tab_users.py --users 4 --decoders auto ar --max-new-tokens 48
"""
from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import time

from concurrent_rounds import rounds

PROMPTS = ["Tell me a joke about cats.", "Explain what a CPU cache is.", "Write a haiku about rain.",
           "List three uses of a paperclip.", "What is the capital of Peru?", "Describe a sunset in one sentence.",
           "Give a tip for learning to code.", "Why is the sky blue?"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--users", type=int, default=4)
    ap.add_argument("--decoders", nargs="+", default=["auto", "ar"])
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--rounds", type=int, default=1)
    args = ap.parse_args()
    from gradio_client import Client
    port = free_port()
    app = subprocess.Popen([sys.executable, "-m", "apps", "--tabs", "text", "--port", str(port)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(600):
            try:
                Client(f"http://127.0.0.1:{port}/", verbose=False)
                break
            except Exception:  # noqa: BLE001 - not up yet
                time.sleep(1)
        else:
            raise SystemExit("the app did not start")
        for decoder in args.decoders:
            def call(prompt, decoder=decoder):
                out = Client(f"http://127.0.0.1:{port}/", verbose=False).predict(
                    prompt, True, decoder, "", args.max_new_tokens, 0.0, 0, 1.0, 0, False, api_name="/generate")
                return str(out)
            rounds(call, PROMPTS[:args.users], args.users, args.rounds, lambda a, b: True, f"Text tab, {decoder}")
    finally:
        app.terminate()
        app.wait(30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
