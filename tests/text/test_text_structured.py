"""Structured output (suite.constraint, issue 37): JSON-schema and regex constraints masked in the one
decode loop for every decoder. On the tiny random Llama with SmolLM2's tokenizer: every lossless
decoder equals constrained `ar` token for token (greedy, fp32), outputs parse and validate, forced
tokens are counted and cost no forwards, rows keep their constraint through the scheduler, bad
input fails before decoding. On the embedded SmolLM2: eagle and auto (the default) too."""
import json
import threading

import pytest
from jsonschema import Draft202012Validator

import suite

SCHEMA = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 6},
    "role": {"enum": ["engineer", "manager"]},
    "age": {"type": "integer", "minimum": 0, "maximum": 99},
    "tags": {"type": "array", "items": {"enum": ["red", "green"]}, "maxItems": 2}},
    "required": ["name", "role", "age", "tags"], "additionalProperties": False}
PROMPTS = ["Extract: Bob is an engineer aged 30.", "Hello there"]
BUDGET = 60
LOSSLESS = [("jacobi", {}), ("sjd", {}), ("mc_sjd", {}), ("ngram", {}), ("lookahead", {}),
            ("speculative", {"draft": "self:1", "num_draft": 2}), ("auto", {})]


def valid(schema, obj) -> bool:
    return obj is not None and not list(Draft202012Validator(schema).iter_errors(obj))


@pytest.fixture(scope="module")
def constrained_ar(tiny):
    return tiny.generate(PROMPTS, decoder="ar", max_new_tokens=BUDGET, json_schema=SCHEMA)


def test_constrained_ar_parses_and_validates(constrained_ar):
    res = constrained_ar
    assert res.finish_reason == ["eos", "eos"]
    assert all(valid(SCHEMA, obj) for obj in res.json), res.text
    assert [json.loads(t) for t in res.text] == res.json
    assert res.stats.num_forced_tokens == 0          # the baseline: one token per forward
    assert res.stats.mask_time_s > 0


@pytest.mark.parametrize("decoder,options", LOSSLESS, ids=[d for d, _ in LOSSLESS])
def test_lossless_decoders_equal_constrained_ar(tiny, constrained_ar, decoder, options):
    res = tiny.generate(PROMPTS, decoder=decoder, max_new_tokens=BUDGET, json_schema=SCHEMA, **options)
    assert res.token_ids == constrained_ar.token_ids
    assert all(valid(SCHEMA, obj) for obj in res.json)
    # the grammar's forced tokens (keys, brackets, the final EOS) came in parallel: fewer forwards than tokens
    assert res.stats.num_forced_tokens > 0
    assert res.stats.num_forwards < constrained_ar.stats.num_forwards


def test_forced_tokens_are_exact_and_save_forwards(tiny, constrained_ar):
    res = tiny.generate(PROMPTS, decoder="ar", max_new_tokens=BUDGET, json_schema=SCHEMA, forced_spans=True)
    assert res.token_ids == constrained_ar.token_ids
    saved = constrained_ar.stats.num_forwards - res.stats.num_forwards
    assert saved > 0 and res.stats.num_forced_tokens >= saved


def test_free_generation_leaves_the_rule(tiny):
    """Unconstrained, the same prompt breaks the schema's shape: the mask is what makes it parse."""
    res = tiny.generate(PROMPTS[0], decoder="ar", max_new_tokens=20)
    assert res.json is None and not res.text.startswith('{"name": "')


def test_regex_constraint(tiny):
    pattern = r"[0-9]{3}-[a-z]{2,4}"
    ar = tiny.generate("Code:", decoder="ar", max_new_tokens=BUDGET, regex=pattern)
    ngram = tiny.generate("Code:", decoder="ngram", max_new_tokens=BUDGET, regex=pattern)
    import re
    assert re.fullmatch(pattern, ar.text) and ar.finish_reason == "eos"
    assert ar.json == ar.text and ngram.token_ids == ar.token_ids


def test_sampling_outputs_stay_valid(tiny):
    res = tiny.generate(PROMPTS[0], decoder="sjd", max_new_tokens=BUDGET, json_schema=SCHEMA, temperature=1.0, seed=3)
    assert valid(SCHEMA, res.json), res.text


def test_budget_inside_the_structure_returns_the_partial_text(tiny):
    res = tiny.generate(PROMPTS[0], decoder="ngram", max_new_tokens=5, json_schema=SCHEMA)
    assert res.finish_reason == "length" and res.json is None
    assert res.text.startswith("{") and "max_new_tokens" in res.parse_error


def test_stream_carries_the_parsed_object(tiny, constrained_ar):
    s = tiny.stream(PROMPTS[0], decoder="lookahead", max_new_tokens=BUDGET, json_schema=json.dumps(SCHEMA))
    assert "".join(s) == constrained_ar.text[0]
    assert s.json == constrained_ar.json[0] and s.parse_error is None


def test_rows_keep_their_constraint_through_the_scheduler(tiny):
    """Three requests at once (a JSON schema, a regex, free text) share one batch; rows leave as they
    finish (select) and each request gets what it gets alone."""
    alone = [tiny.generate(PROMPTS[0], decoder="ngram", max_new_tokens=BUDGET, json_schema=SCHEMA).token_ids,
             tiny.generate(PROMPTS[1], decoder="ngram", max_new_tokens=BUDGET, regex=r"(yes|no), [a-z]{1,9}").token_ids,
             tiny.generate(PROMPTS[1], decoder="ngram", max_new_tokens=12).token_ids]
    calls = [dict(prompt=PROMPTS[0], json_schema=SCHEMA), dict(prompt=PROMPTS[1], regex=r"(yes|no), [a-z]{1,9}"),
             dict(prompt=PROMPTS[1], max_new_tokens=12)]
    out = [None] * 3
    barrier = threading.Barrier(3)

    def call(i):
        barrier.wait()
        kw = {"max_new_tokens": BUDGET, **calls[i]}
        out[i] = tiny.generate(kw.pop("prompt"), decoder="ngram", **kw).token_ids
    threads = [threading.Thread(target=call, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert out == alone


def test_constraints_select_and_extend_with_their_rows(tiny):
    g = tiny.grammar(json_schema=SCHEMA)
    rows = g.rows(3)
    inputs = suite.RequestInputs(constraints=rows)
    assert inputs.select([2, 0]).constraints == (rows[2], rows[0])
    joined = inputs.select([1]).extend(suite.RequestInputs(), 1, 2)
    assert joined.constraints == (rows[1], None, None)
    with pytest.raises(ValueError, match="one suite.constraint.RowConstraint"):
        suite.prepare(tiny.model, [[1, 2], [3]], inputs=suite.RequestInputs(constraints=rows))


@pytest.mark.parametrize("kwargs,match", [
    (dict(json_schema={"type": "objec"}), "invalid JSON schema"),
    (dict(json_schema="{not json"), "not valid JSON"),
    (dict(json_schema=["a"]), "a JSON schema is a JSON object"),
    (dict(json_schema=SCHEMA, regex="a+"), "exactly one of json_schema"),
    (dict(regex="a(b"), "invalid regex"),
])
def test_bad_constraints_fail_before_decoding(tiny, kwargs, match):
    with pytest.raises(ValueError, match=match):
        tiny.generate("Hi", decoder="ngram", max_new_tokens=4, **kwargs)


@pytest.mark.parametrize("argv,match", [
    (["--regex", "a(b"], "invalid regex"),
    (["--json-schema", "/nonexistent/schema.json"], "no JSON schema file"),
    (["--regex", "a+", "--json-schema", "SCHEMA"], "not both"),
    (["--json-schema", "BAD"], "invalid JSON schema"),
])
def test_cli_bad_constraints_exit_2(tmp_path, capsys, argv, match):
    from text.__main__ import main
    (tmp_path / "s.json").write_text(json.dumps(SCHEMA))
    (tmp_path / "bad.json").write_text('{"type": "objec"}')
    argv = [{"SCHEMA": str(tmp_path / "s.json"), "BAD": str(tmp_path / "bad.json")}.get(a, a) for a in argv]
    assert main(["Hi"] + argv) == 2
    assert match in capsys.readouterr().err


def test_cli_json_schema_prints_the_json(tiny_dir, tmp_path, capsys):
    from text.__main__ import main
    (tmp_path / "s.json").write_text(json.dumps(SCHEMA))
    assert main([PROMPTS[0], "--model", str(tiny_dir), "--json-schema", str(tmp_path / "s.json"),
                 "--decoder", "ngram", "--max-new-tokens", str(BUDGET)]) == 0
    assert valid(SCHEMA, json.loads(capsys.readouterr().out))


# -- the embedded SmolLM2 (its EAGLE head: eagle and auto, the default decoder) ------------------------

PERSON = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                                           "role": {"enum": ["engineer", "manager", "designer"]}},
          "required": ["name", "age", "role"], "additionalProperties": False}


def test_smollm2_eagle_and_auto_equal_constrained_ar(smol):
    prompt = "Extract the person as JSON (name, age, role).\nText: Maria Lopez is a 34-year-old engineer."
    ar = smol.generate(prompt, decoder="ar", chat=True, max_new_tokens=40, json_schema=PERSON)
    assert ar.json == {"name": "Maria Lopez", "age": 34, "role": "engineer"}
    for decoder in ("eagle", "auto"):
        res = smol.generate(prompt, decoder=decoder, chat=True, max_new_tokens=40, json_schema=PERSON)
        assert res.token_ids == ar.token_ids, decoder
        assert res.stats.num_forced_tokens > 0 and res.stats.num_forwards < ar.stats.num_forwards


def test_cli_input_records_carry_the_json(tiny_dir, tmp_path):
    from text.__main__ import main
    (tmp_path / "s.json").write_text(json.dumps(SCHEMA))
    (tmp_path / "prompts.txt").write_text("\n".join(PROMPTS) + "\n")
    out = tmp_path / "out.jsonl"
    assert main(["--input", str(tmp_path / "prompts.txt"), "--output", str(out), "--model", str(tiny_dir),
                 "--json-schema", str(tmp_path / "s.json"), "--decoder", "ngram",
                 "--max-new-tokens", str(BUDGET)]) == 0
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["prompt"] for r in records] == PROMPTS
    assert all(valid(SCHEMA, r["json"]) and r["parse_error"] is None and json.loads(r["text"]) == r["json"]
               for r in records)


@pytest.fixture(scope="module")
def tiny_fixed_bf16(tiny_dir):
    """The tiny model in bfloat16 on the fixed step, a lone row at most 8 slots a step (text.load's default in bf16)."""
    import text
    gen = text.load(tiny_dir, dtype="bfloat16")
    assert gen.adapter.capabilities.step_width == 8
    return gen


def test_forced_spans_fit_the_fixed_step_and_stay_exact_in_bf16(tiny_fixed_bf16, monkeypatch):
    """Under a fixed step no forward is wider than the step (a forced span is cut to the row's slots: a wider one rounds
    differently from ar's steps): forced spans and every lossless decoder give constrained ar's tokens bitwise."""
    import suite.loop
    gen, widths, score = tiny_fixed_bf16, [], suite.loop.score
    monkeypatch.setattr(suite.loop, "score", lambda model, cache, draft: widths.append(draft.tokens.shape[1])
                        or score(model, cache, draft))
    schema = {"type": "object", "properties": {"the_full_name_of_the_person_named_in_the_text": SCHEMA["properties"]["name"],
                                               "role": SCHEMA["properties"]["role"]},
              "required": ["the_full_name_of_the_person_named_in_the_text", "role"], "additionalProperties": False}
    ar = gen.generate(PROMPTS, decoder="ar", max_new_tokens=BUDGET, json_schema=schema)
    spans = gen.generate(PROMPTS, decoder="ar", max_new_tokens=BUDGET, json_schema=schema, forced_spans=True)
    assert spans.token_ids == ar.token_ids and spans.stats.num_forced_tokens > 8
    steps = {w for _, w in gen.adapter.capabilities.row_widths}
    assert set(widths) <= steps | {64}, widths       # the step's widths and prefill chunks only
    assert spans.stats.num_forwards < ar.stats.num_forwards
    for decoder, options in LOSSLESS:
        res = gen.generate(PROMPTS, decoder=decoder, max_new_tokens=BUDGET, json_schema=schema, **options)
        assert res.token_ids == ar.token_ids, decoder
