"""JSON Schema as written (issue 50), model-free on SmolLM2's tokenizer: a grammar accepts a document iff
its tokens (then EOS) pass the matcher. Undeclared properties allowed unless the schema (or strict mode)
closes the object, `pattern` searched, `required` enforced; the backend chosen per schema by its
keywords, a keyword no backend enforces relaxed and listed, the rest enforced (refused by name on request,
or where nothing is left to enforce); an
unsatisfiable pattern, an unsupported draft and a schema over the budget refused before decoding;
compiled grammars cached; every output checked against its schema; and on a slice of the
JSONSchemaBench sample no invalid instance accepted by a grammar without a stated relaxation."""
import collections
import json
import sys
from pathlib import Path

import pytest

from suite.constraint import Budget, Compiler, ConstraintError

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))


@pytest.fixture(scope="module")
def compiler(embedded_folder):
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(str(embedded_folder), local_files_only=True)
    return Compiler(tok, len(tok), [tok.convert_tokens_to_ids("<|im_end|>")])


def accepts(compiler, grammar, doc) -> bool:
    from schema_compliance import accepts as run
    text = doc if isinstance(doc, str) else json.dumps(doc, ensure_ascii=False)
    return run(grammar, compiler._encode(text), compiler.stop[0])


OPEN = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}}, "required": ["a"]}


@pytest.mark.parametrize("backend", ["xgrammar", "llguidance"])
def test_objects_are_open_unless_closed_and_required_is_enforced(compiler, backend):
    g = compiler.compile(json_schema=OPEN, backend=backend)
    assert accepts(compiler, g, {"a": 1}) and accepts(compiler, g, {"a": 1, "c": [2]})
    assert not accepts(compiler, g, {}) and not accepts(compiler, g, {"b": "x"})
    closed = compiler.compile(json_schema=OPEN, backend=backend, strict=True)
    assert accepts(compiler, closed, {"a": 1, "b": "x"}) and not accepts(compiler, closed, {"a": 1, "c": 2})
    assert json.loads(closed.source)["additionalProperties"] is False       # what the result is checked against


def test_auto_picks_the_backend_that_enforces_every_keyword(compiler):
    assert compiler.compile(json_schema=OPEN).backend == "xgrammar"
    for schema in ({"type": "string", "pattern": "a"}, {"type": "string", "maxLength": 3},
                   {"allOf": [{"type": "integer"}, {"minimum": 5}]}):
        g = compiler.compile(json_schema=schema)
        assert g.backend == "llguidance" and g.relaxed == ()
    searched = compiler.compile(json_schema={"type": "string", "pattern": "a"})
    assert accepts(compiler, searched, '"bab"') and not accepts(compiler, searched, '"b"')
    anchored = compiler.compile(json_schema={"type": "string", "pattern": "^a"})
    assert accepts(compiler, anchored, '"ab"') and not accepts(compiler, anchored, '"ba"')
    both = compiler.compile(json_schema={"allOf": [{"type": "integer"}, {"minimum": 5}]})
    assert accepts(compiler, both, "6") and not accepts(compiler, both, "3")


def test_unenforced_keywords_are_relaxed_and_listed_or_refused_by_name_on_request(compiler):
    schema = {"type": "array", "items": {"type": "integer"}, "uniqueItems": True}
    g = compiler.compile(json_schema=schema)
    assert g.relaxed == ("uniqueItems",)
    assert accepts(compiler, g, [1, 2]) and not accepts(compiler, g, ["x"])       # the rest is enforced
    assert g.validate("[1, 1]")[2:] == (False, ["at /: [1, 1] has non-unique elements (uniqueItems: not enforced "
                                                "while generating)"])            # the result check says so
    assert compiler.compile(json_schema=schema, backend="xgrammar").relaxed == ("uniqueItems",)
    for backend in ("auto", "xgrammar", "llguidance"):
        with pytest.raises(ConstraintError, match="uniqueItems.*approximate=False, --enforce-all"):
            compiler.compile(json_schema=schema, backend=backend, approximate=False)
    assert compiler.compile(json_schema={"type": "integer", "format": "int64"}).relaxed == ()   # an annotation


def test_an_asserted_format_no_backend_knows_is_named_too():
    from suite.constraint import check
    regex = {"type": "string", "format": "regex"}          # jsonschema asserts it; neither grammar enforces it
    with pytest.raises(ConstraintError, match="uses format:regex"):
        check(regex, approximate=False)
    assert check(regex).relaxed == ("format:regex",)


@pytest.mark.parametrize("schema", [{"not": {"type": "null"}}, {"uniqueItems": True}])
def test_a_schema_with_nothing_left_to_enforce_is_refused(schema):
    from suite.constraint import check
    with pytest.raises(ConstraintError, match="Nothing sensible is left to enforce"):
        check(schema)
    assert check({"type": "array", **schema}).relaxed         # a type beside it: that much is enforced


@pytest.mark.parametrize("kwargs", [dict(json_schema={"type": "string", "pattern": "[^\\s\\S]"}),
                                    dict(json_schema={"type": "object", "properties": {"a": {
                                        "type": "string", "pattern": "[^\\s\\S]"}}, "required": ["a"]}),
                                    dict(regex="[^\\s\\S]"), dict(regex="[^\\s\\S]", backend="llguidance")])
def test_unsatisfiable_constraints_are_refused(compiler, kwargs):
    with pytest.raises(ConstraintError, match="admits no"):
        compiler.compile(**kwargs)


def test_drafts_and_budget_are_checked_before_compiling(compiler, embedded_folder):
    with pytest.raises(ConstraintError, match="unsupported JSON Schema draft.*2020-12"):
        compiler.compile(json_schema={"$schema": "http://json-schema.org/draft-03/schema#", "type": "string"})
    assert compiler.compile(json_schema={"$schema": "http://json-schema.org/draft-07/schema#", "type": "string"})
    small = Compiler(compiler.tokenizer, compiler.vocab_size, compiler.stop, budget=Budget(max_schema_nodes=2))
    with pytest.raises(ConstraintError, match="over the compile budget of 2"):
        small.compile(json_schema=OPEN)


def test_compiled_grammars_are_cached_lru(compiler):
    tiny = Compiler(compiler.tokenizer, compiler.vocab_size, compiler.stop, cache_size=2)
    a = tiny.compile(json_schema=OPEN)
    assert tiny.compile(json_schema=json.loads(json.dumps(OPEN))) is a
    tiny.compile(regex="[0-9]+"), tiny.compile(regex="[a-z]+")
    assert tiny.compile(json_schema=OPEN) is not a                 # evicted: the least recently used


def test_results_are_validated_with_formats(compiler):
    g = compiler.compile(json_schema={"type": "object", "properties": {"d": {"type": "string", "format": "date"}}})
    assert g.validate('{"d": "2026-12-04"}')[2:] == (True, [])
    parsed, error, valid, errors = g.validate('{"d": "yesterday"}')
    assert parsed == {"d": "yesterday"} and error is None and not valid and "date" in errors[0]
    assert g.validate('{"d": "2026')[2] is False
    assert g.validate('{"d": "2026')[1] == ("not complete JSON (Unterminated string starting at: char 6): "
                                            "raise max_new_tokens")


def test_llguidance_rows_end_on_eos_and_roll_back(compiler):
    g = compiler.compile(json_schema={"enum": ["yes"]}, backend="llguidance")
    row = g.row()
    tokens = compiler._encode('"yes"')
    row.accept(tokens)
    assert not row.finished and row.single() == compiler.stop[0]          # EOS: the only token left
    assert row.matcher.accept_token(compiler.stop[0]) and row.finished
    row.matcher.rollback(len(tokens) + 1)
    assert not row.finished and row.matcher.accept_token(tokens[0])


def test_jsonschemabench_slice_accepts_no_invalid_instance(compiler):
    from schema_compliance import load_sample, run
    records = load_sample()[::40]            # 9 schemas across the splits
    splits = run(records, compiler)
    total = sum(splits.values(), collections.Counter())
    assert total["compiled"] >= 0.9 * total["schemas"] and total["invalid"] > 0
    assert total["weakened"] == 0
    assert total["valid"] - total["valid_accepted"] <= 0.05 * total["valid"] + 1


UNIQUE = {"type": "array", "items": {"enum": [1, 2, 3]}, "uniqueItems": True, "maxItems": 3}


def test_generate_reports_validity_and_what_was_relaxed(tiny):
    with pytest.raises(ValueError, match="uniqueItems"):
        tiny.generate("Hi", decoder="ngram", max_new_tokens=4, json_schema=UNIQUE, constraint={"approximate": False})
    with pytest.raises(ValueError, match="admits no"):
        tiny.generate("Hi", decoder="ngram", max_new_tokens=4, regex="[^\\s\\S]")
    res = tiny.generate(["Numbers:", "Hi"], decoder="ngram", max_new_tokens=24, json_schema=UNIQUE)
    assert res.relaxed == ("uniqueItems",)
    for obj, valid, errors in zip(res.json, res.valid, res.validation_errors):
        assert obj is not None and valid == (len(set(obj)) == len(obj)) and bool(errors) != valid


def test_cli_refuses_before_decoding_with_exit_2(tiny_dir, tmp_path, capsys):
    from text.__main__ import main
    assert main(["Hi", "--model", str(tiny_dir), "--regex", "[^\\s\\S]"]) == 2
    assert "admits no text" in capsys.readouterr().err
    (tmp_path / "u.json").write_text(json.dumps(UNIQUE))
    assert main(["Hi", "--model", str(tiny_dir), "--json-schema", str(tmp_path / "u.json"), "--enforce-all"]) == 2
    err = capsys.readouterr().err
    assert "uniqueItems" in err and "--enforce-all" in err
    assert main(["Numbers:", "--model", str(tiny_dir), "--json-schema", str(tmp_path / "u.json"),
                 "--decoder", "ngram", "--max-new-tokens", "24"]) == 0
    err = capsys.readouterr().err
    assert "not enforced while generating (the output is checked against them): uniqueItems" in err
    assert "valid under the schema" in err
