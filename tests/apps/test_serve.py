"""apps.serve, driven by the official openai client: chat, completions, streaming with usage, async
concurrency, json_schema output, and the documented errors (400, 401, 404, 413, 503); a cut
connection cancels its request and the server goes on serving."""
import asyncio
import concurrent.futures
import json
import threading
import time

import httpx
import openai
import pytest

from apps.serve import build_app

KEY = "test-key"
MODEL = "SmolLM2-135M-Instruct"


@pytest.fixture(scope="module")
def gen():
    import text
    g = text.load(progress=False)
    g.use_prefix_cache(64 << 20)
    return g


@pytest.fixture(scope="module")
def base_url(gen):
    import uvicorn
    config = uvicorn.Config(build_app(gen, api_key=KEY, max_queue=8), host="127.0.0.1", port=0, log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    port = server.servers[0].sockets[0].getsockname()[1]
    yield f"http://127.0.0.1:{port}/v1"
    server.should_exit = True
    thread.join(10)


@pytest.fixture(scope="module")
def client(base_url):
    return openai.OpenAI(base_url=base_url, api_key=KEY, max_retries=0)


def serial(gen, prompt, n=12, chat=True):
    return gen.generate(prompt, decoder="ar", max_new_tokens=n, chat=chat).text


def test_models_and_a_greedy_chat_equal_to_the_python_api(client, gen):
    assert [m.id for m in client.models.list().data] == [MODEL]
    out = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Name a colour."}],
                                         temperature=0, max_tokens=12, extra_body={"decoder": "ar"})
    assert out.choices[0].message.content == serial(gen, "Name a colour.")
    assert out.choices[0].finish_reason in ("stop", "length")
    usage = out.usage.model_dump()
    assert usage["completion_tokens"] > 0 and usage["forwards"] >= 1 and usage["tokens_per_forward"] > 0


def test_streaming_with_usage_and_stop(client, gen):
    whole = serial(gen, "Count from one to five.", 16)
    stream = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Count from one to five."}],
                                            temperature=0, max_completion_tokens=16, stream=True,
                                            stream_options={"include_usage": True}, extra_body={"decoder": "ngram"})
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole and chunks[-1].usage is not None and not chunks[-1].choices
    stop = whole[len(whole) // 2:][:3]
    cut = client.completions.create(model=MODEL, prompt="The capital of France is", temperature=0, max_tokens=12,
                                    stop=[stop] if stop.strip() else None)
    plain = serial(gen, "The capital of France is", 12, chat=False)
    assert plain.startswith(cut.choices[0].text)


def test_async_clients_share_the_server_and_keep_their_answers(base_url, gen):
    prompts = ["Say hi.", "What is 2+2?", "Name a fruit."]

    async def run():
        client = openai.AsyncOpenAI(base_url=base_url, api_key=KEY, max_retries=0)
        calls = [client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": p}], temperature=0,
                                                max_tokens=10) for p in prompts]
        return await asyncio.gather(*calls)

    with concurrent.futures.ThreadPoolExecutor(1) as pool:     # its own loop: a browser test may hold this thread's
        outs = pool.submit(asyncio.run, run()).result()
    assert [o.choices[0].message.content for o in outs] == [serial(gen, p, 10) for p in prompts]


def test_json_schema_output_parses(client):
    schema = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
              "required": ["name", "age"], "additionalProperties": False}
    out = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "A person as JSON."}], temperature=0, max_tokens=40,
        response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": schema, "strict": True}})
    obj = json.loads(out.choices[0].message.content)
    assert set(obj) == {"name", "age"} and isinstance(obj["age"], int)
    checked = out.choices[0].model_dump()        # the extension fields: the answer checked against its schema
    assert checked["valid"] is True and checked["validation_errors"] == [] and checked["relaxed"] == []


def test_errors_are_openai_errors_and_the_server_goes_on(client, base_url):
    with pytest.raises(openai.BadRequestError) as bad:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}], temperature=5)
    assert "temperature" in bad.value.body["message"]
    with pytest.raises(openai.BadRequestError) as bad:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}],
                                       extra_body={"decoder": "no-such-decoder"})
    assert "/" not in bad.value.body["message"].replace("/v1", "")     # no server paths
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "x"}])
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=base_url, api_key="wrong", max_retries=0).models.list()
    r = httpx.post(f"{base_url}/chat/completions", content=b"{not json", headers={"Authorization": f"Bearer {KEY}"})
    assert r.status_code == 400 and r.json()["error"]["message"]
    assert client.models.list().data[0].id == MODEL


def test_a_cut_connection_cancels_its_request(base_url, client, gen):
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Write a long story."}], "temperature": 0,
            "max_tokens": 200, "stream": True, "decoder": "ar"}
    with httpx.stream("POST", f"{base_url}/chat/completions", json=body,
                      headers={"Authorization": f"Bearer {KEY}"}, timeout=60) as r:
        for line in r.iter_lines():
            if line.startswith("data:") and '"content"' in line and '"content": ""' not in line:
                break                                       # one token arrived: hang up
    deadline = time.monotonic() + 60

    def stats():
        return httpx.get(f"{base_url}/stats", headers={"Authorization": f"Bearer {KEY}"}).json()
    while (gen.scheduler.live_rows or stats()["in_flight"]) and time.monotonic() < deadline:
        time.sleep(0.1)                                     # the handler notices the cut at its next step
    assert gen.scheduler.live_rows == 0                     # the request left the batch long before 200 tokens
    assert stats()["in_flight"] == 0 and stats()["prefix_cache"]["lookups"] > 0
    out = client.completions.create(model=MODEL, prompt="Hello", temperature=0, max_tokens=4)
    assert out.choices[0].text == serial(gen, "Hello", 4, chat=False)


def test_queue_and_body_limits(gen):
    from starlette.testclient import TestClient
    full = TestClient(build_app(gen, max_queue=0))
    r = full.post("/v1/completions", json={"model": MODEL, "prompt": "x"})
    assert r.status_code == 503 and r.json()["error"]["code"] == "queue_full"
    small = TestClient(build_app(gen, max_body_bytes=64))
    r = small.post("/v1/completions", json={"model": MODEL, "prompt": "x" * 200})
    assert r.status_code == 413 and "error" in r.json()
    assert small.get("/v1/nowhere").status_code == 404
