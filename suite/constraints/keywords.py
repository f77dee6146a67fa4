"""A JSON schema's keywords: which constrain (and where), which draft it declares, how big it is, and
its closed form (strict mode). The backend choice reads them: a backend is used only for schemas whose
every constraining keyword it enforces."""
from __future__ import annotations

import copy

# Keywords that only annotate (they constrain nothing a validator checks).
ANNOTATIONS = frozenset({
    "$schema", "$id", "id", "$comment", "$anchor", "$dynamicAnchor", "$vocabulary", "title", "description",
    "default", "examples", "deprecated", "readOnly", "writeOnly", "contentMediaType", "contentEncoding",
    "contentSchema", "$defs", "definitions"})

# Keywords of the JSON Schema vocabularies (draft-04 to 2020-12) that constrain an instance. Anything else
# ("x-foo", "nullable") is an unknown keyword, which validators ignore, and so does every backend.
CONSTRAINING = frozenset({
    "type", "enum", "const", "properties", "required", "additionalProperties", "patternProperties",
    "propertyNames", "minProperties", "maxProperties", "dependentRequired", "dependentSchemas", "dependencies",
    "unevaluatedProperties", "items", "prefixItems", "additionalItems", "contains", "minContains", "maxContains",
    "minItems", "maxItems", "uniqueItems", "unevaluatedItems", "minLength", "maxLength", "pattern", "format",
    "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "allOf", "anyOf", "oneOf",
    "not", "if", "then", "else", "$ref", "$dynamicRef", "$recursiveRef"})

_ONE = ("additionalProperties", "propertyNames", "unevaluatedProperties", "additionalItems", "contains", "not",
        "if", "then", "else", "unevaluatedItems")
_MAP = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_LIST = ("allOf", "anyOf", "oneOf", "prefixItems")

DRAFTS = {
    "http://json-schema.org/draft-04/schema": "draft-04",
    "http://json-schema.org/draft-06/schema": "draft-06",
    "http://json-schema.org/draft-07/schema": "draft-07",
    "https://json-schema.org/draft/2019-09/schema": "2019-09",
    "https://json-schema.org/draft/2020-12/schema": "2020-12",
}


def subschemas(schema):
    """(keyword, subschema) pairs one level down."""
    if not isinstance(schema, dict):
        return
    for k in _ONE:
        if isinstance(schema.get(k), dict):
            yield k, schema[k]
    for k in _MAP:
        if isinstance(schema.get(k), dict):
            for v in schema[k].values():
                if isinstance(v, dict):
                    yield k, v
    for k in _LIST:
        if isinstance(schema.get(k), list):
            for v in schema[k]:
                if isinstance(v, dict):
                    yield k, v
    items = schema.get("items")
    if isinstance(items, dict):
        yield "items", items
    elif isinstance(items, list):
        for v in items:
            if isinstance(v, dict):
                yield "items", v
    deps = schema.get("dependencies")
    if isinstance(deps, dict):
        for v in deps.values():
            if isinstance(v, dict):
                yield "dependencies", v


def walk(schema):
    """Every (sub)schema object, depth first."""
    stack = [schema]
    while stack:
        s = stack.pop()
        if isinstance(s, dict):
            yield s
            stack.extend(v for _, v in subschemas(s))


def keywords(schema: dict) -> set[str]:
    """The constraining keywords the schema uses anywhere, with the readings a backend may lack named apart:
    "items (array form)" (draft-04 tuples), "exclusiveMinimum (boolean form)" (draft-04), "pattern with
    minLength/maxLength", "anyOf beside other keywords", "format:<name>"."""
    found = set()
    for s in walk(schema):
        for k, v in s.items():
            if k not in CONSTRAINING:
                continue
            if k == "items" and isinstance(v, list):
                found.add("items (array form)")
            elif k in ("exclusiveMinimum", "exclusiveMaximum") and isinstance(v, bool):
                found.add(f"{k} (boolean form)")
            elif k == "format":
                found.add(f"format:{v}")
            elif k == "additionalProperties" and v is not False and v != {} and v is not True:
                found.add("additionalProperties (a schema)")
            else:
                found.add(k)
        if "pattern" in s and ("minLength" in s or "maxLength" in s):
            found.add("pattern with minLength/maxLength")
        for k in ("anyOf", "$ref"):
            if k in s and any(o in CONSTRAINING for o in s if o != k):
                found.add(f"{k} beside other keywords")
    return found


def size(schema) -> int:
    """The number of subschemas: the compile budget's measure."""
    return sum(1 for _ in walk(schema))


def draft(schema: dict) -> str | None:
    """The draft its $schema declares ("2020-12", ...), None without $schema; ValueError naming the fix
    for one no validator here implements (draft-03, or an unknown URI)."""
    uri = schema.get("$schema")
    if uri is None:
        return None
    key = str(uri).rstrip("#").replace("https://json-schema.org/draft-0", "http://json-schema.org/draft-0")
    key = key.replace("http://json-schema.org/draft/", "https://json-schema.org/draft/")
    if key not in DRAFTS:
        raise ValueError(f"unsupported JSON Schema draft $schema={uri!r}: use draft-04, -06, -07, 2019-09 or "
                         "2020-12 (e.g. \"https://json-schema.org/draft/2020-12/schema\"), or drop $schema")
    return DRAFTS[key]


def closed(schema: dict) -> dict:
    """Strict mode (as OpenAI's strict: true): a copy where every object schema that lists properties
    and says nothing about others gets "additionalProperties": false."""
    out = copy.deepcopy(schema)
    for s in walk(out):
        if "properties" in s and not any(k in s for k in ("additionalProperties", "patternProperties",
                                                          "unevaluatedProperties")):
            s["additionalProperties"] = False
    return out


def asserted_formats(schema: dict) -> frozenset:
    """The formats the result check asserts (jsonschema's Draft 2020-12 format checker, with the packages of
    requirements/text.txt, suite/constraints/validate.py); any other `format` is an annotation no validator
    checks."""
    from jsonschema.validators import Draft202012Validator
    return frozenset(Draft202012Validator.FORMAT_CHECKER.checkers)


def without_annotations(schema: dict) -> dict:
    """A copy without the `format`s no validator asserts ("int64", "byte", "path"): what the grammar
    must enforce is what the result check asserts, nothing else."""
    known = asserted_formats(schema)
    out = copy.deepcopy(schema)
    for s in walk(out):
        if isinstance(s.get("format"), str) and s["format"] not in known:
            del s["format"]
    return out


def relaxed_keyword(name: str) -> str:
    """The keyword a relaxation names ("format:regex" -> "format", "items (array form)" -> "items"); a name
    that is no keyword's ("anyOf beside other keywords": its siblings, a backend's message) as it is."""
    if "beside" in name:
        return name
    base = name.split(":")[0].split(" ")[0].split("/")[0]
    return base if base in CONSTRAINING else name
