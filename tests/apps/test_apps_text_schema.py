"""The Text tab's structured output (issue 37), through its handler and API name (no browser): the
JSON-schema box constrains the streamed answer and returns the parsed object; a bad schema is a
readable error before any decoding."""
import json

import gradio as gr
import pytest

SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 6},
                                           "role": {"enum": ["engineer", "manager"]}},
          "required": ["name", "role"], "additionalProperties": False}


@pytest.fixture(scope="module")
def handler(tiny_dir):
    import text
    from apps.text import build_demo
    demo = build_demo(text.load(tiny_dir))
    fns = {getattr(dep, "api_name", None): dep.fn for dep in demo.fns.values()}
    assert "generate" in fns
    return fns["generate_json"]


def test_schema_box_streams_json_and_the_parsed_object(handler):
    frames = list(handler("Extract: Bob, engineer.", json.dumps(SCHEMA), False, "ngram", "", 40, 0.0, 0, 1.0, 0,
                          True, ""))
    output, validity, parsed = frames[-1][0], frames[-1][-2], frames[-1][-1]
    assert json.loads(output) == parsed and parsed["role"] in ("engineer", "manager")
    assert validity.startswith("**Valid**")
    assert frames[-1][2] == output          # compare: constrained ar gives the same answer


def test_bad_schema_is_a_readable_error(handler):
    with pytest.raises(gr.Error, match="invalid JSON schema"):
        list(handler("Hi", '{"type": "objec"}', False, "ngram", "", 8, 0.0, 0, 1.0, 0, False, ""))
