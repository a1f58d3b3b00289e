"""Java and JavaScript argument values as source literals (for the ground-truth replay).

BFCL's simple_java / simple_javascript functions declare Java or JavaScript types; BFCL shows them to
a model as strings (its language hint) and its checker parses the string the model gives back with
its own type converters. A possible answer holds the parsed values, so replaying it means writing
each value the way such a string is written: `true`, `5L`, `new ArrayList<>(Arrays.asList("a"))`,
`new HashMap<String, Object>() {{ put("k", 1); }}`, `['a', 'b']`, `{key: 'v'}`.
"""

from __future__ import annotations

import json
from typing import Any


def _java_scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    return str(value)


def _java_element(value: Any, collection: str, items: str | None) -> str:
    """An element as BFCL's parser of that collection reads it: an ArrayList of String/char strips
    the quotes, an Array of a declared type converts each element as that type, untyped ones parse
    Java literals."""
    if items is None or (collection == "ArrayList" and items in ("String", "char")):
        return _java_scalar(value)
    return java_literal(value, items)


def java_literal(value: Any, declared: str, items: str | None = None) -> str:
    """One Java argument for a parameter of the declared type (BFCL's JAVA_TYPE_CONVERSION names)."""
    if isinstance(value, str) and declared in ("String", "any", "char"):
        return value
    if declared == "long" and isinstance(value, int):
        return f"{value}L"
    if declared == "float" and isinstance(value, (int, float)):
        return f"{value}f"
    if declared in ("ArrayList", "Array") and isinstance(value, list):
        elements = ", ".join(_java_element(v, declared, items) for v in value)
        if declared == "ArrayList":
            return f"new ArrayList<>(Arrays.asList({elements}))" if value else "new ArrayList<>()"
        return f"new {items or 'Object'}[]{{{elements}}}"
    if declared == "HashMap" and isinstance(value, dict):
        puts = " ".join(f"put({json.dumps(str(k))}, {_java_scalar(v)});" for k, v in value.items())
        return f"new HashMap<String, Object>() {{{{ {puts} }}}}" if value else "new HashMap<>()"
    return value if isinstance(value, str) else _java_scalar(value)


def _js_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):  # BFCL's parser strips either quote and reads no escapes
        return f'"{value}"' if "'" in value else f"'{value}'"
    if isinstance(value, list):
        return "[" + ", ".join(_js_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_js_value(v)}" for k, v in value.items()) + "}"
    return str(value)


def js_literal(value: Any, declared: str) -> str:
    """One JavaScript argument for a parameter of the declared type (BFCL's JS_TYPE_CONVERSION names)."""
    if isinstance(value, str):
        return value
    if declared == "Bigint" and isinstance(value, int):
        return f"{value}n"
    return _js_value(value)


def render_arguments(arguments: dict[str, Any], raw_doc: dict[str, Any], language: str) -> dict[str, Any]:
    """All arguments of one call as literals, typed by the function's own (un-hinted) declaration."""
    props = (raw_doc.get("parameters") or {}).get("properties") or {}
    out = {}
    for name, value in arguments.items():
        prop = props.get(name) or {}
        declared = str(prop.get("type", "any"))
        items = (prop.get("items") or {}).get("type") if isinstance(prop.get("items"), dict) else None
        out[name] = java_literal(value, declared, items) if language == "java" else js_literal(value, declared)
    return out
