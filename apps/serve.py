"""An OpenAI-compatible HTTP server over a text model's scheduler (suite.scheduler: concurrent requests share
forwards), with automatic prefix caching (suite.prefix_cache).

    python -m apps.serve                                  # the embedded SmolLM2 on http://127.0.0.1:8000/v1
    python -m apps.serve --model DIR --port 8080 --api-key KEY
    PARASUITE_API_KEY=KEY python -m apps.serve --host 0.0.0.0

    from openai import OpenAI
    client = OpenAI(base_url="http://127.0.0.1:8000/v1", api_key="KEY or anything without --api-key")
    client.chat.completions.create(model="SmolLM2-135M-Instruct", messages=[{"role": "user", "content": "Hi"}],
                                   temperature=0, extra_body={"decoder": "ngram"})

Endpoints: GET /v1/models, GET /v1/models/{id}, POST /v1/completions, POST /v1/chat/completions (stream: true
sends server-sent events; stream_options.include_usage adds a last chunk with the usage), GET /v1/stats (the
prefix cache's counters, requests in flight, the model's global suffix tree: its size and hit rate), GET /health. Fields: max_tokens / max_completion_tokens,
temperature (default 1, as OpenAI's), top_p, seed, stop, n, response_format (json_object, json_schema), and the
extensions `decoder` (any text decoder of suite.DECODERS; default auto) and `decoder_options` (its options).
`usage` adds `forwards`, `tokens_per_forward` and `prompt_tokens_details.cached_tokens` (prompt tokens the
prefix cache served). Errors are OpenAI error objects: 400 a bad request, 401 a missing or wrong key, 404 an
unknown model or route, 413 a body over --max-body-bytes, 503 when --max-queue requests are in flight. A client
that disconnects cancels its request (its rows leave the batch).
"""
from __future__ import annotations

import argparse
import asyncio
import hmac
import json
import os
import re
import threading
import time
import uuid

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from suite.params import DEFAULT_MAX_NEW_TOKENS
from text.row_text import RowText, check_stops

ROLES = ("system", "developer", "user", "assistant")
UNSUPPORTED = {"tools": None, "functions": None, "tool_choice": None, "logit_bias": None, "logprobs": False,
               "top_logprobs": None, "echo": False, "suffix": None, "best_of": 1, "presence_penalty": 0,
               "frequency_penalty": 0}    # fields refused unless they hold these (absent or null is fine)


class ServeError(Exception):
    """An OpenAI error object with its HTTP status."""

    def __init__(self, status: int, message: str, kind: str = "invalid_request_error", param: str | None = None,
                 code: str | None = None):
        super().__init__(message)
        self.status, self.message, self.kind, self.param, self.code = status, message, kind, param, code

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}

    def response(self) -> JSONResponse:
        headers = {"WWW-Authenticate": "Bearer"} if self.status == 401 else None
        return JSONResponse(self.body(), status_code=self.status, headers=headers)


def _clean(message: str) -> str:
    """An error message without the server's file paths."""
    return re.sub(r"(?<![\w.])/(?:[\w.@+-]+/)+[\w.@+-]*", "<path>", message)


# -- request bodies -> scheduler arguments ---------------------------------------------------------------

def _number(body: dict, name: str, lo: float, hi: float, default, integer: bool = False):
    value = body.get(name)
    if value is None:
        return default
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or not lo <= value <= hi:
        kind = "an integer" if integer else "a number"
        raise ServeError(400, f"'{name}' must be {kind} in [{lo}, {hi}], got {value!r}", param=name)
    return value


def _stops(body: dict) -> list[str]:
    try:
        return check_stops(body.get("stop"))
    except ValueError:
        raise ServeError(400, "'stop' must be a non-empty string or a list of up to 4 of them", param="stop") from None


def _strict(body: dict) -> bool:
    """response_format json_schema's `strict`: objects closed to undeclared properties (suite.constraint)."""
    spec = (body.get("response_format") or {}).get("json_schema") if isinstance(body.get("response_format"), dict) \
        else None
    return isinstance(spec, dict) and spec.get("strict") is True


def _schema(body: dict):
    fmt = body.get("response_format")
    if fmt is None:
        return None
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "object"}
    if kind == "json_schema":
        spec = fmt.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, dict) else None
        if not isinstance(schema, dict):
            raise ServeError(400, "response_format json_schema needs json_schema.schema (an object)",
                             param="response_format")
        return schema
    raise ServeError(400, "response_format.type must be 'text', 'json_object' or 'json_schema'", param="response_format")


def _decoder(body: dict, decoders: list[str]) -> tuple[str, dict]:
    """The request's decoder (one of `decoders`, this model's) and its options, checked as a client's
    (suite.runtime.options.client_options: no file, no operator limit, every value typed and in range)."""
    from suite.runtime.options import client_options
    decoder = body.get("decoder", "auto")
    if not isinstance(decoder, str) or decoder not in decoders:
        raise ServeError(400, f"'decoder' must be one of this model's decoders: {', '.join(decoders)}",
                         param="decoder")
    options = body.get("decoder_options")
    if options is None:
        return decoder, {}
    if not isinstance(options, dict):
        raise ServeError(400, "'decoder_options' must be an object of option names and values",
                         param="decoder_options")
    try:
        return decoder, client_options(decoder, options)
    except ValueError as e:
        raise ServeError(400, str(e), param="decoder_options") from None


def _options(body: dict, decoders: list[str]) -> dict:
    for name, allowed in UNSUPPORTED.items():
        value = body.get(name)
        if value is not None and value != allowed:
            raise ServeError(400, f"'{name}' is not supported by this server", param=name)
    decoder, options = _decoder(body, decoders)
    stream_options = body.get("stream_options") or {}
    if not isinstance(stream_options, dict):
        raise ServeError(400, "'stream_options' must be an object", param="stream_options")
    return {
        "max_new_tokens": _number(body, "max_completion_tokens", 1, 1 << 20, None, integer=True)
        or _number(body, "max_tokens", 1, 1 << 20, DEFAULT_MAX_NEW_TOKENS, integer=True),
        "temperature": float(_number(body, "temperature", 0, 2, 1.0)),
        "top_p": _number(body, "top_p", 1e-9, 1, None),
        "seed": _number(body, "seed", -(1 << 63), (1 << 63) - 1, None, integer=True),
        "n": _number(body, "n", 1, 16, 1, integer=True),
        "stops": _stops(body),
        "schema": _schema(body),
        "strict": _strict(body),
        "decoder": decoder,
        "decoder_options": options,
        "stream": bool(body.get("stream", False)),
        "include_usage": bool(stream_options.get("include_usage", False)),
    }


def _content(message: dict, i: int) -> str:
    content = message.get("content")
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) and p.get("type") == "text" for p in content):
        return "".join(str(p.get("text", "")) for p in content)
    raise ServeError(400, f"messages[{i}].content must be a string or text parts (this model reads text only)",
                     param="messages")


def chat_rows(gen, body: dict) -> list[int]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ServeError(400, "'messages' must be a non-empty list", param="messages")
    turns = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in ROLES:
            raise ServeError(400, f"messages[{i}].role must be one of {', '.join(ROLES)}", param="messages")
        role = "system" if m["role"] == "developer" else m["role"]
        turns.append({"role": role, "content": _content(m, i)})
    if not getattr(gen.tokenizer, "chat_template", None):
        raise ServeError(400, f"{gen.name} has no chat template: use /v1/completions", param="messages")
    return gen.chat_row(turns)


def completion_rows(gen, body: dict, vocab: int) -> list[list[int]]:
    """The prompts of a completion request as token id rows: text, or ids each in [0, vocab)."""
    prompt = body.get("prompt")
    if isinstance(prompt, str) or (isinstance(prompt, list) and prompt and all(isinstance(p, str) for p in prompt)):
        texts = [prompt] if isinstance(prompt, str) else prompt
        if not all(texts):
            raise ServeError(400, "'prompt' must not be empty", param="prompt")
        return gen.tokenizer(texts)["input_ids"]
    rows = [prompt] if isinstance(prompt, list) and prompt and all(_is_int(t) for t in prompt) else prompt
    if not (isinstance(rows, list) and rows and all(isinstance(r, list) and r and all(_is_int(t) for t in r)
                                                     for r in rows)):
        raise ServeError(400, "'prompt' must be a string, a list of strings, or token ids", param="prompt")
    if not all(0 <= t < vocab for r in rows for t in r):
        raise ServeError(400, f"'prompt' token ids must be in [0, {vocab - 1}], this model's vocabulary",
                         param="prompt")
    return rows


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# -- one request: its rows' text as the scheduler's steps arrive ----------------------------------------

def _finish_reason(finish: str | None) -> str | None:
    """OpenAI's finish_reason for a row's end (text.row_text.RowText.finish): "length", or "stop" for a
    stop string and for the model's end token alike."""
    return "length" if finish == "length" else finish and "stop"


def _checked(text: str, grammar) -> dict:
    """A structured answer's check against its schema (extension fields of a choice): valid,
    validation_errors, and what the grammar relaxed; {} for free text."""
    if grammar is None:
        return {}
    _, _, valid, errors = grammar.validate(text)
    return {"valid": valid, "validation_errors": errors, "relaxed": list(grammar.relaxed)}


class Job:
    """A submitted request's steps, carried from the scheduler's thread to the event loop."""

    def __init__(self, gen, rows: list[list[int]], opts: dict, request, on_end=None, prompt_tokens: int = 0):
        self.rows, self.request = rows, request    # request: submit(...)'s suite.scheduler.Request
        self.prompt_tokens = prompt_tokens         # each prompt counted once, whatever n (as OpenAI counts)
        self.grammar = opts.get("grammar")         # its constraint (suite.constraint.Grammar), or None
        self.on_end = on_end                       # called on the event loop once the request ended
        self.texts = [RowText(gen.decode, gen.eos_token_ids, opts["stops"]) for _ in rows]
        self.loop = asyncio.get_running_loop()
        self.queue: asyncio.Queue = asyncio.Queue()
        threading.Thread(target=self._pump, daemon=True, name="parasuite-serve-job").start()

    def _pump(self) -> None:
        from suite.scheduler import RequestCancelled
        try:
            for step in self.request.steps():
                self.loop.call_soon_threadsafe(self.queue.put_nowait, step)
            item = None
        except RequestCancelled:
            item = None
        except Exception as e:              # noqa: BLE001 - reported to the client as an error object
            item = e
        self.loop.call_soon_threadsafe(self.queue.put_nowait, item)
        if self.on_end is not None:
            self.loop.call_soon_threadsafe(self.on_end)

    async def chunks(self):
        """(row, text, finish_reason or None) as steps arrive; cancels the request when the caller leaves."""
        try:
            while not all(t.finish for t in self.texts):
                step = await self.queue.get()
                if step is None:
                    break
                if isinstance(step, Exception):
                    raise ServeError(500 if not isinstance(step, ValueError) else 400, _clean(str(step)),
                                     kind="server_error")
                for r, (tokens, done) in enumerate(zip(step.committed, step.done)):
                    was = self.texts[r].finish
                    text = self.texts[r].add(tokens, done)
                    if text or self.texts[r].finish != was:
                        yield r, text, _finish_reason(self.texts[r].finish)
        finally:
            self.cancel()
        for r, t in enumerate(self.texts):          # rows cut short (the request ended): their end
            if t.finish is None:
                yield r, t.end(), _finish_reason(t.finish)

    def cancel(self) -> None:
        if not self.request.done:
            self.request.cancel()

    def usage(self) -> dict:
        stats = self.request.stats
        prompt = self.prompt_tokens
        completion = sum(len(t.ids) for t in self.texts)
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
                "prompt_tokens_details": {"cached_tokens": stats.events.get("prefix_cache_hit_tokens", 0)},
                "forwards": stats.num_forwards, "tokens_per_forward": round(stats.tokens_per_forward, 3)}


# -- the app ---------------------------------------------------------------------------------------------

class Server:
    def __init__(self, gen, model_name: str, api_key: str | None = None, max_queue: int = 64,
                 max_body_bytes: int = 1 << 20):
        if not hasattr(gen, "submit_rows"):
            raise ValueError(f"{gen.name} is not a text generator this server drives (text.load of a causal LM)")
        self.gen, self.model_name, self.api_key = gen, model_name, api_key
        self.max_queue, self.max_body_bytes = max_queue, max_body_bytes
        self.in_flight = 0
        self.created = int(time.time())
        self.decoders = text_decoders(gen)
        from suite import as_adapter
        self.vocab = as_adapter(gen.model).config.vocab_size

    def app(self) -> Starlette:
        routes = [Route("/health", self.health), Route("/v1/models", self.models),
                  Route("/v1/models/{model:path}", self.model), Route("/v1/stats", self.stats),
                  Route("/v1/chat/completions", self.chat, methods=["POST"]),
                  Route("/v1/completions", self.completions, methods=["POST"])]
        return Starlette(routes=routes, exception_handlers={HTTPException: self._http_error, Exception: self._crash})

    @staticmethod
    async def _http_error(request: Request, exc: HTTPException) -> JSONResponse:
        kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        return ServeError(exc.status_code, f"{request.method} {request.url.path}: {exc.detail}", kind).response()

    @staticmethod
    async def _crash(request: Request, exc: Exception) -> JSONResponse:
        return ServeError(500, "internal server error", "server_error").response()

    def _submit(self, rows: list[list[int]], opts: dict):
        """The checked, queued request (off the event loop: a grammar compiles, a decoder binds)."""
        grammar = None
        if opts["schema"] is not None:
            grammar = opts["grammar"] = self.gen.grammar(json_schema=opts["schema"], strict=opts["strict"])
        return self.gen.submit_rows(rows, decoder=opts["decoder"], max_new_tokens=opts["max_new_tokens"],
                                    temperature=opts["temperature"], top_p=opts["top_p"], seed=opts["seed"],
                                    stream=True, grammar=grammar, **opts["decoder_options"])

    def _ended(self) -> None:
        self.in_flight -= 1              # a request counts until its rows left the scheduler

    def _check_key(self, request: Request) -> None:
        if self.api_key is None:
            return
        given = request.headers.get("authorization", "")
        scheme, _, key = given.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(key.strip().encode(), self.api_key.encode()):
            raise ServeError(401, "Incorrect or missing API key: send 'Authorization: Bearer <key>'",
                             code="invalid_api_key")

    async def health(self, request: Request):
        return JSONResponse({"status": "ok"})

    def _card(self) -> dict:
        return {"id": self.model_name, "object": "model", "created": self.created, "owned_by": "parasuite"}

    async def models(self, request: Request):
        try:
            self._check_key(request)
        except ServeError as e:
            return e.response()
        return JSONResponse({"object": "list", "data": [self._card()]})

    async def model(self, request: Request):
        try:
            self._check_key(request)
            self._check_model(request.path_params["model"])
        except ServeError as e:
            return e.response()
        return JSONResponse(self._card())

    async def stats(self, request: Request):
        try:
            self._check_key(request)
        except ServeError as e:
            return e.response()
        from suite.decoders.chain.suffix import global_tree_stats
        cache = self.gen.prefix_cache
        return JSONResponse({"in_flight": self.in_flight, "prefix_cache": cache.counters() if cache else None,
                             "suffix_tree": global_tree_stats(self.gen.model)})

    def _check_model(self, name) -> None:
        if name is not None and name != self.model_name:
            raise ServeError(404, f"The model '{name}' does not exist: this server serves '{self.model_name}'",
                             param="model", code="model_not_found")

    async def _body(self, request: Request) -> dict:
        declared = request.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > self.max_body_bytes:
            raise ServeError(413, f"the request body is over {self.max_body_bytes} bytes")
        data = bytearray()
        async for part in request.stream():
            data += part
            if len(data) > self.max_body_bytes:
                raise ServeError(413, f"the request body is over {self.max_body_bytes} bytes")
        try:
            body = json.loads(data)
        except (ValueError, UnicodeDecodeError):
            raise ServeError(400, "the request body is not valid JSON") from None
        if not isinstance(body, dict):
            raise ServeError(400, "the request body must be a JSON object")
        return body

    async def chat(self, request: Request):
        return await self._serve(request, chat=True)

    async def completions(self, request: Request):
        return await self._serve(request, chat=False)

    async def _serve(self, request: Request, chat: bool):
        try:
            self._check_key(request)
            body = await self._body(request)
            self._check_model(body.get("model"))
            opts = _options(body, self.decoders)
            prompts = [chat_rows(self.gen, body)] if chat else completion_rows(self.gen, body, self.vocab)
            rows = [r for r in prompts for _ in range(opts["n"])]
            if self.in_flight >= self.max_queue:
                raise ServeError(503, f"the server is busy ({self.max_queue} requests in flight): retry later",
                                 kind="server_error", code="queue_full")
            self.in_flight += 1                    # counted while it is checked (a grammar compiles) too
            try:
                submitted = await asyncio.to_thread(self._submit, rows, opts)
            except (ValueError, TypeError) as e:
                self.in_flight -= 1
                raise ServeError(400, _clean(str(e))) from None
            except BaseException:
                self.in_flight -= 1
                raise
            job = Job(self.gen, rows, opts, submitted, on_end=self._ended, prompt_tokens=sum(map(len, prompts)))
        except ServeError as e:
            return e.response()
        head = {"id": f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex[:24]}",
                "object": "chat.completion" if chat else "text_completion", "created": int(time.time()),
                "model": self.model_name}
        if opts["stream"]:
            return StreamingResponse(self._events(job, head, chat, opts["include_usage"]),
                                     media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
        try:
            return await self._whole(request, job, head, chat)
        except ServeError as e:
            return e.response()
        finally:
            job.cancel()

    async def _whole(self, request: Request, job: Job, head: dict, chat: bool):
        finish: dict[int, str] = {}

        async def drain():
            async for r, _, reason in job.chunks():
                if reason:
                    finish[r] = reason

        task = asyncio.ensure_future(drain())
        while not task.done():
            await asyncio.wait([task], timeout=0.25)
            if not task.done() and await request.is_disconnected():
                job.cancel()
                task.cancel()
                return JSONResponse({}, status_code=499)
        task.result()
        if chat:
            choices = [{"index": r, "message": {"role": "assistant", "content": t.text}, "logprobs": None,
                        "finish_reason": finish.get(r, _finish_reason(t.finish)), **_checked(t.text, job.grammar)}
                       for r, t in enumerate(job.texts)]
        else:
            choices = [{"index": r, "text": t.text, "logprobs": None,
                        "finish_reason": finish.get(r, _finish_reason(t.finish)), **_checked(t.text, job.grammar)}
                       for r, t in enumerate(job.texts)]
        return JSONResponse({**head, "choices": choices, "usage": job.usage()})

    async def _events(self, job: Job, head: dict, chat: bool, include_usage: bool):
        kind = "chat.completion.chunk" if chat else "text_completion"
        extra = {"usage": None} if include_usage else {}

        def chunk(choices: list) -> str:
            return "data: " + json.dumps({**head, "object": kind, "choices": choices, **extra}) + "\n\n"

        try:
            if chat:
                yield chunk([{"index": r, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                              "finish_reason": None} for r in range(len(job.rows))])
            async for r, text, reason in job.chunks():
                if chat:
                    delta = {"content": text} if text else {}
                    yield chunk([{"index": r, "delta": delta, "logprobs": None, "finish_reason": reason}])
                else:
                    yield chunk([{"index": r, "text": text, "logprobs": None, "finish_reason": reason}])
            if include_usage:
                yield "data: " + json.dumps({**head, "object": kind, "choices": [], "usage": job.usage()}) + "\n\n"
        except ServeError as e:
            yield "data: " + json.dumps(e.body()) + "\n\n"
        finally:
            job.cancel()
        yield "data: [DONE]\n\n"


def text_decoders(gen) -> list[str]:
    """The decoders a request may name for `gen`'s model: its own sampler's for a canvas model, else the
    text decoders its adapter can run (the registry's "any" and "text" ones whose capabilities it has)."""
    from suite import as_adapter
    from suite.registry import list_decoders
    if gen.decoders:
        return list(gen.decoders)
    adapter = gen.adapter if gen.adapter is not None else as_adapter(gen.model)
    return [n for n in list_decoders("text", adapter=adapter) if n != "diffusion_gemma"]


def build_app(gen, model_name: str | None = None, api_key: str | None = None, max_queue: int = 64,
              max_body_bytes: int = 1 << 20) -> Starlette:
    """The ASGI app serving `gen` (a text.TextGenerator) under `model_name` (default: its name's last part)."""
    name = model_name or default_name(gen)
    return Server(gen, name, api_key, max_queue, max_body_bytes).app()


def default_name(gen) -> str:
    name = str(gen.name)
    if name.startswith("SmolLM2-135M-Instruct"):
        return "SmolLM2-135M-Instruct"
    return os.path.basename(os.path.normpath(name)) or name


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m apps.serve", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="examples:\n  python -m apps.serve\n"
                                       "  python -m apps.serve --model ~/models/Qwen2.5-0.5B-Instruct --port 8080\n"
                                       "  PARASUITE_API_KEY=secret python -m apps.serve --host 0.0.0.0")
    p.add_argument("--model", help="a local transformers causal LM folder (default: the embedded SmolLM2)")
    p.add_argument("--served-model-name", help="the model id clients send (default: the model's name)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--api-key", default=os.environ.get("PARASUITE_API_KEY"),
                   help="require 'Authorization: Bearer KEY' (default: $PARASUITE_API_KEY; none: no key)")
    p.add_argument("--dtype", default=None, help="float32, bfloat16 or auto (default: $PARASUITE_DTYPE or auto: bfloat16 where the CPU runs it natively)")
    p.add_argument("--max-queue", type=int, default=64, help="requests in flight before 503 (default 64)")
    p.add_argument("--max-body-bytes", type=int, default=1 << 20, help="largest request body (default 1 MiB)")
    p.add_argument("--prefix-cache-mb", type=int, default=512,
                   help="memory for cached prefixes' K/V (default 512; 0 turns prefix caching off)")
    p.add_argument("--suffix-tree-tokens", type=int, default=200_000,
                   help="tokens of earlier outputs the model's global suffix tree keeps for the suffix and auto "
                        "decoders, oldest requests evicted first (default 200000, about 45 MB)")
    p.add_argument("--suffix-tree-file", default=None, metavar="PATH",
                   help="keep the global suffix tree across restarts: 'auto' (the model's file in the parasuite "
                        "cache) or a path; read at start, written as requests end (at most every 30 s) and at exit; "
                        "it holds at most --suffix-tree-tokens tokens, a few bytes each (default: memory only)")
    args = p.parse_args(argv)
    import uvicorn

    import text
    gen = text.load(args.model, dtype=args.dtype)
    if args.prefix_cache_mb > 0:
        gen.use_prefix_cache(args.prefix_cache_mb << 20)
    from suite.decoders.chain.suffix import global_tree
    global_tree(gen.model, args.suffix_tree_tokens, args.suffix_tree_file)   # made now with the operator's cap (and
                                                                            # file), shared by every request
    app = build_app(gen, args.served_model_name, args.api_key, args.max_queue, args.max_body_bytes)
    if args.host not in ("127.0.0.1", "localhost", "::1") and not args.api_key:
        print(f"warning: serving on {args.host} without --api-key: anyone who reaches it can use it")
    print(f"serving {default_name(gen) if not args.served_model_name else args.served_model_name} "
          f"on http://{args.host}:{args.port}/v1")
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
