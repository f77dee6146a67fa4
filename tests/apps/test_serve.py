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


# -- what a client may not do: name a server file, reach a 500 ---------------------------------------------

def test_no_decoder_option_that_names_a_file_or_a_limit_is_taken_from_a_client(client, gen, tmp_path):
    """Every option of every text decoder that a client may not set (files: corpora, draft models, heads;
    objects; the operator's limits) is refused by name with a 400 that shows nothing of the server's files,
    and the file it names is never opened (an audit hook watches every open of the process)."""
    import dataclasses
    import sys

    import suite
    from apps.serve import text_decoders
    from suite.runtime.options import ui_options
    secret = tmp_path / "secret.txt"
    secret.write_text("the server's own words\n")
    opened = []
    sys.addaudithook(lambda event, args: opened.append(str(args[0])) if event == "open" and args
                     and str(args[0]).startswith(str(tmp_path)) else None)
    refused = 0
    for decoder in text_decoders(gen):
        for f in dataclasses.fields(suite.DECODERS[decoder]):
            if f.name in ui_options(decoder):
                continue
            for value in (str(secret), str(tmp_path), "/etc/passwd", "/no/such/file"):
                with pytest.raises(openai.BadRequestError) as bad:
                    client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hi"}],
                                                   max_tokens=2, extra_body={"decoder": decoder,
                                                                             "decoder_options": {f.name: value}})
                message = bad.value.body["message"]
                assert f"decoder_options.{f.name}" in message and "operator" in message
                assert "/" not in message and "exist" not in message and "secret" not in message
                refused += 1
    assert refused >= 30 and {"corpus", "draft_model", "draft_head", "max_corpus_tokens"} <= {
        f.name for d in text_decoders(gen) for f in dataclasses.fields(suite.DECODERS[d])}
    assert opened == []


def test_option_values_typed_and_in_range_and_token_ids_in_the_vocabulary(client):
    for options in ({"num_draft": "x"}, {"num_draft": -3}, {"num_draft": 10 ** 12}, {"num_draft": 2.5},
                    {"adaptive": "maybe"}, {"num_draft": None}):
        with pytest.raises(openai.BadRequestError) as bad:
            client.completions.create(model=MODEL, prompt="Hi", max_tokens=2,
                                      extra_body={"decoder": "ngram", "decoder_options": options})
        assert "num_draft" in bad.value.body["message"] or "adaptive" in bad.value.body["message"]
    for ids in ([999999999], [-1], [[1, 2], [3, 10 ** 9]]):
        with pytest.raises(openai.BadRequestError) as bad:
            client.completions.create(model=MODEL, prompt=ids, max_tokens=2)
        assert "vocabulary" in bad.value.body["message"]
    with pytest.raises(openai.BadRequestError) as bad:
        client.completions.create(model=MODEL, prompt="Hi", extra_body={"decoder": "zipar"})
    assert "ngram" in bad.value.body["message"] and "delay" not in bad.value.body["message"]


def test_usage_counts_each_prompt_once_whatever_n(client):
    one = client.completions.create(model=MODEL, prompt="The sky is", max_tokens=3, temperature=0)
    two = client.completions.create(model=MODEL, prompt="The sky is", max_tokens=3, temperature=0, n=2)
    assert two.usage.prompt_tokens == one.usage.prompt_tokens
    assert two.usage.completion_tokens == 2 * one.usage.completion_tokens


def test_a_seeded_fuzz_of_every_field_gets_no_500(base_url):
    """500 requests, each a valid one with one to three fields replaced by a wrong type, an out-of-range
    value or out-of-vocabulary ids: every answer is a 200 or an OpenAI error object with a 4xx status."""
    import random
    rng = random.Random(0)
    junk = [None, -1, 0, 1, 2.5, -1e300, 10 ** 12, True, "x", "", "/etc/passwd", [], [1], [-1], [999999999],
            [[1], [2, 999999999]], {}, {"a": 1}, [{"role": "user"}], "\x00" * 3, "a" * 2000, float("nan")]
    fields = ["model", "messages", "prompt", "max_tokens", "max_completion_tokens", "temperature", "top_p", "seed",
              "stop", "n", "stream", "stream_options", "response_format", "decoder", "decoder_options", "tools",
              "logprobs", "logit_bias", "user", "echo", "suffix", "best_of"]
    options = ["num_draft", "window", "max_ngram", "adaptive", "corpus", "draft_model", "max_corpus_tokens", "cost",
               "draft", "init", "bogus"]
    statuses = {}
    with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {KEY}"}, timeout=120) as http:
        for i in range(500):
            chat = i % 2 == 0
            body = {"model": MODEL, "max_tokens": 2, "temperature": 0,
                    **({"messages": [{"role": "user", "content": "Hi"}]} if chat else {"prompt": "Hi"})}
            for _ in range(rng.randint(1, 3)):
                if rng.random() < 0.3:
                    body["decoder"] = rng.choice(["ngram", "jacobi", "sam_decoding", "speculative", "auto", "x"])
                    body["decoder_options"] = {rng.choice(options): rng.choice(junk)}
                else:
                    body[rng.choice(fields)] = rng.choice(junk)
            if body.get("stream") is True:
                body["stream"] = False
            content = json.dumps(body, allow_nan=True)
            r = http.post("/chat/completions" if chat else "/completions", content=content)
            statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
            assert r.status_code < 500, (r.status_code, content[:300], r.text[:300])
            if r.status_code != 200:
                assert r.json()["error"]["message"], content[:300]
    assert statuses.get(200, 0) > 20 and statuses.get(400, 0) > 200


def test_requests_share_the_models_global_suffix_tree_and_stats_report_it(client, base_url):
    """Requests decoded with `suffix` feed one global tree per model (the Text tab's too); /v1/stats shows it grow."""
    def stats():
        return httpx.get(f"{base_url}/stats", headers={"Authorization": f"Bearer {KEY}"}).json()["suffix_tree"]
    before = stats()
    for _ in range(2):
        client.completions.create(model=MODEL, prompt="List the days of the week:", temperature=0, max_tokens=12,
                                  extra_body={"decoder": "suffix"})
    after = stats()
    assert after["tokens"] > before["tokens"] and after["lookups"] > before["lookups"]
    assert after["max_tokens"] == before["max_tokens"] and "hit_rate" in after
    with pytest.raises(openai.BadRequestError):           # the cap is the operator's
        client.completions.create(model=MODEL, prompt="x", max_tokens=2,
                                  extra_body={"decoder": "suffix", "decoder_options": {"global_tokens": 10 ** 9}})
