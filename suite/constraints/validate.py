"""Every structured result checked against its schema before it is returned: jsonschema's validator for
the schema's declared draft (Draft 2020-12 without $schema), the formats Draft 2020-12 knows asserted
whatever the draft ("uuid" in a draft-06 schema too: what the grammar enforces)."""
from __future__ import annotations

MAX_ERRORS = 5


def validator(schema: dict):
    """A jsonschema validator of the schema, with format checking."""
    from jsonschema.validators import Draft202012Validator, validator_for
    cls = validator_for(schema, default=Draft202012Validator)
    return cls(schema, format_checker=Draft202012Validator.FORMAT_CHECKER)


def errors(schema: dict, instance, checker=None, relaxed=()) -> list[str]:
    """Why the instance is not valid under the schema ([] when it is): at most MAX_ERRORS messages,
    each with the place in the instance, and a keyword the grammar left out (`relaxed`) named as such."""
    from .keywords import relaxed_keyword
    checker = checker or validator(schema)
    unenforced = {relaxed_keyword(r) for r in relaxed}
    out = []
    for e in sorted(checker.iter_errors(instance), key=lambda e: list(map(str, e.absolute_path))):
        where = "/" + "/".join(str(p) for p in e.absolute_path)
        note = f" ({e.validator}: not enforced while generating)" if e.validator in unenforced else ""
        out.append(f"at {where}: {e.message}{note}" if len(out) < MAX_ERRORS else "... and more")
        if len(out) > MAX_ERRORS:
            break
    return out
