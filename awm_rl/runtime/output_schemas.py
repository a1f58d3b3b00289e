"""Output schemas and structured results for the MCP tools of `awm serve` (MCP 2025-06-18).

A route with a response model (`response_model=` or a return annotation) describes its success
response in the app's OpenAPI document; that schema, `$ref`s resolved into `$defs` the way the
input schemas are, becomes the tool's `outputSchema`, and a successful call's JSON body becomes its
`structuredContent`. MCP wants an object schema: a list, scalar or nullable result is wrapped as
`{"result": ...}` and flagged `x-fastmcp-wrap-result`, as fastmcp does for its own tools (its client
then unwraps it).

Generated code can lie (a handler returning a `Response` bypasses FastAPI's response validation), so
every structured result is checked against its schema. A body that does not match is an
environment error, as FastAPI makes it a 500 when it catches the mismatch itself: the call returns
`isError` with the body and what did not match, never structured content a client would reject.

Built only for `awm serve`, once per process: the pool's tool listing skips response models (see
`tools._without_responses`), because they are most of the OpenAPI generation time.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match

from awm_rl.runtime.tools import ToolRoute, _defs_for, _rewrite_refs

WRAP_FLAG = "x-fastmcp-wrap-result"
WRAP_META = {"fastmcp": {"wrap_result": True}}  # tells fastmcp's client to unwrap `result`


@dataclass(frozen=True, slots=True)
class OutputSchema:
    """One tool's output schema (as listed) and the check of its results."""

    schema: dict[str, Any]
    wrapped: bool
    validator: Draft202012Validator

    @property
    def meta(self) -> dict[str, Any] | None:
        return WRAP_META if self.wrapped else None

    def structured(self, text: str, status: int) -> tuple[dict[str, Any] | None, str | None]:
        """(structured content, None) for a success body that matches the schema, else (None, the
        environment error to show beside the body)."""
        try:
            value = json.loads(text)
        except ValueError:
            return None, _mismatch(status, "the response is not JSON")
        content = {"result": value} if self.wrapped else value
        error = best_match(self.validator.iter_errors(content))
        if error is not None:
            where = error.json_path.replace("$.result", "$", 1) if self.wrapped else error.json_path
            return None, _mismatch(status, f"at {where}: {error.message[:300]}")
        return content, None


def _mismatch(status: int, what: str) -> str:
    return (f"Environment error: the environment answered HTTP {status} (its effects, if any, are applied), "
            f"but the response does not match the tool's output schema ({what}).")


def object_schema(schema: dict[str, Any], components: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """An OpenAPI response schema as a self-contained MCP output schema: (schema, wrapped)."""
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/components/schemas/"):
        target = components.get(ref.rsplit("/", 1)[1])
        if isinstance(target, dict) and target.get("type") == "object":
            schema = target  # a model: its own schema at the root, the models it uses in $defs
    defs = _defs_for(schema, components)
    body = _rewrite_refs(schema)
    wrapped = body.get("type") != "object"
    out = {"type": "object", "properties": {"result": body}, "required": ["result"], WRAP_FLAG: True} \
        if wrapped else dict(body)
    if defs:
        out["$defs"] = defs
    return out, wrapped


def _success_schema(op: dict[str, Any], status_code: int | None) -> dict[str, Any] | None:
    """The JSON schema FastAPI documents for the route's own success status (its response model)."""
    response = op.get("responses", {}).get(str(status_code or 200))
    schema = ((response or {}).get("content", {}).get("application/json") or {}).get("schema")
    return schema or None  # `{}`: no response model, nothing to promise


def build_output_schemas(app: Any, tools: dict[str, ToolRoute]) -> dict[str, OutputSchema]:
    """Tool name -> output schema, for each tool whose route has a response model."""
    from fastapi.openapi.utils import get_openapi
    from fastapi.routing import APIRoute

    with_model = [r for r in app.routes if isinstance(r, APIRoute) and r.include_in_schema
                  and r.response_field is not None]
    if not with_model:
        return {}
    doc = get_openapi(title="env", version="0", routes=with_model)
    components = dict(doc.get("components", {}).get("schemas", {}))
    out: dict[str, OutputSchema] = {}
    for route in with_model:
        for method in sorted(route.methods or ()):
            op_id = route.operation_id or route.unique_id
            tool = tools.get(op_id)
            # A shadowed tool is answered by the route that shadows it: nothing to promise.
            if tool is None or tool.shadowed_by or tool.name in out \
                    or (tool.method, tool.path) != (method, route.path_format):
                continue
            op = doc.get("paths", {}).get(route.path_format, {}).get(method.lower()) or {}
            if op.get("operationId") != op_id:
                # Another route on the same method and path took its place in the document.
                single = get_openapi(title="env", version="0", routes=[route])
                components.update(single.get("components", {}).get("schemas", {}))
                op = single.get("paths", {}).get(route.path_format, {}).get(method.lower()) or {}
            schema = _success_schema(op, route.status_code)
            if schema is not None:
                listed, wrapped = object_schema(schema, components)
                out[tool.name] = OutputSchema(listed, wrapped, Draft202012Validator(listed))
    return out
