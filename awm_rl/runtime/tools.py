"""Tools from a FastAPI app's routes: MCP-like specs and the mapping of flat arguments to a request.

Tool argument convention (project contract): a tool's input is ONE flat JSON object holding the
route's path params, query params and, when the route takes one Pydantic body model, that model's
fields merged at top level. The body model may be optional (`Optional[M] = None`, `M | None = None`,
`Body(None)`): it is listed the same way, none of its fields required, and the body is sent only when
one of its fields is given. Several body params (or `Body(embed=True)`): one property per param name;
a single non-object body (a scalar, a list): one property named after the param. A path/query param
and a body field with the same name are one argument whose value goes to both. Nothing else is
accepted: `input_schema` says `additionalProperties: false` (unless the body model itself takes extra
keys) and `check_argument_names` rejects any other name, so a misspelled or misplaced argument is an
error the agent reads instead of a value silently dropped. `input_schema` is built from the app's own
OpenAPI document (so descriptions, defaults and enums match what FastAPI validates).
"""

from __future__ import annotations

import copy
import difflib
import json
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlencode


@dataclass(slots=True)
class ToolRoute:
    """How one tool maps onto its HTTP route."""

    name: str
    method: str
    path: str  # template, e.g. /api/campaigns/{campaign_id}
    description: str
    input_schema: dict[str, Any]
    path_params: tuple[str, ...] = ()
    query_params: tuple[str, ...] = ()
    body_fields: tuple[str, ...] = ()  # properties merged from the body into the flat arguments
    has_body: bool = False
    body_required: bool = False
    body_param: str | None = None  # set when the whole body is one non-object value under this name
    shadowed_by: str | None = None  # an earlier route that answers this tool's requests (a routing bug)
    open_body: bool = False  # the body model takes extra keys (extra="allow"): other names go into the body

    def spec(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "input_schema": self.input_schema}

    def accepted(self) -> list[str]:
        """The argument names this tool takes."""
        return list(self.input_schema.get("properties") or {})


def _collect_refs(node: Any, out: set[str]) -> None:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/components/schemas/"):
            out.add(ref.rsplit("/", 1)[1])
        for v in node.values():
            _collect_refs(v, out)
    elif isinstance(node, list):
        for v in node:
            _collect_refs(v, out)


def _rewrite_refs(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: ("#/$defs/" + v.rsplit("/", 1)[1] if k == "$ref" and isinstance(v, str)
                    and v.startswith("#/components/schemas/") else _rewrite_refs(v)) for k, v in node.items()}
    if isinstance(node, list):
        return [_rewrite_refs(v) for v in node]
    return node


def _defs_for(node: Any, components: dict[str, Any]) -> dict[str, Any]:
    """Every component schema `node` references, transitively, with refs rewritten to `#/$defs/`."""
    pending: set[str] = set()
    _collect_refs(node, pending)
    seen: dict[str, Any] = {}
    while pending:
        name = pending.pop()
        if name in seen or name not in components:
            continue
        seen[name] = components[name]
        more: set[str] = set()
        _collect_refs(components[name], more)
        pending |= more - set(seen)
    return {k: _rewrite_refs(v) for k, v in sorted(seen.items())}


def _describe(op: dict[str, Any]) -> str:
    summary = (op.get("summary") or "").strip()
    description = (op.get("description") or "").strip()
    if summary and description and description != summary:
        return f"{summary}. {description}" if not summary.endswith(".") else f"{summary} {description}"
    return summary or description


def _without_responses(route: Any) -> Any:
    """A shallow copy of an APIRoute without response models: tools only need the request side, and
    response schemas are most of the OpenAPI generation time (~6x faster on the corpus envs)."""
    light = copy.copy(route)
    light.response_field = None
    light.response_fields = {}
    light.response_model = None
    return light


def build_tool_routes(app: Any) -> dict[str, ToolRoute]:
    """Map tool name -> ToolRoute for every route of `app` that has an operation_id (or a name)."""
    from fastapi.openapi.utils import get_openapi
    from fastapi.routing import APIRoute

    api_routes = [r for r in app.routes if isinstance(r, APIRoute) and r.include_in_schema]
    light = {id(r): _without_responses(r) for r in api_routes}
    schema = get_openapi(title=str(getattr(app, "title", "env")), version="0", routes=list(light.values()))
    components = dict(schema.get("components", {}).get("schemas", {}))
    by_key: dict[tuple[str, str], dict[str, Any]] = {}
    for path, item in schema.get("paths", {}).items():
        for method, op in item.items():
            if isinstance(op, dict):
                by_key[(path, method.upper())] = op
    counts: dict[tuple[str, str], int] = {}
    for r in api_routes:
        for m in r.methods or ():
            counts[(r.path_format, m)] = counts.get((r.path_format, m), 0) + 1

    routes: dict[str, ToolRoute] = {}
    for route in api_routes:
        for method in sorted(route.methods or ()):
            if counts[(route.path_format, method)] > 1:
                # Same method and path as another route: the merged document keeps only one of
                # them, so describe this route on its own.
                single = get_openapi(title="t", version="0", routes=[light[id(route)]])
                components.update(single.get("components", {}).get("schemas", {}))
                op = single.get("paths", {}).get(route.path_format, {}).get(method.lower())
            else:
                op = by_key.get((route.path_format, method))
            if op is None:
                continue
            name = op.get("operationId") or route.name
            if name in routes:  # one tool per name: first route wins (FastAPI warns about duplicates too)
                continue
            body_alias = route.body_field.alias if route.body_field is not None else "body"
            tool = route_from_operation(name, method, route.path_format, op, components, body_alias)
            tool.shadowed_by = _shadowing_route(app, route, method)
            routes[name] = tool
    return routes


def route_from_operation(name: str, method: str, path: str, op: dict[str, Any], components: dict[str, Any],
                         body_alias: str = "body") -> ToolRoute:
    """One OpenAPI operation -> ToolRoute with its flat input schema (see module docstring)."""
    properties: dict[str, Any] = {}
    required: list[str] = []
    path_params: list[str] = []
    query_params: list[str] = []
    for p in op.get("parameters", []):
        where = p.get("in")
        if where not in ("path", "query"):
            continue  # headers / cookies are not part of the tool convention
        prop = dict(p.get("schema") or {})
        if p.get("description") and "description" not in prop:
            prop["description"] = p["description"]
        # FastAPI puts `Query(..., example=)` / `Path(..., example=)` on the parameter, not its schema.
        if "example" in p and "example" not in prop:
            prop["example"] = p["example"]
        elif isinstance(p.get("examples"), dict) and p["examples"] and "examples" not in prop:
            first = next(iter(p["examples"].values()))
            if isinstance(first, dict) and "value" in first:
                prop["example"] = first["value"]
        properties[p["name"]] = prop
        if p.get("required"):
            required.append(p["name"])
        (path_params if where == "path" else query_params).append(p["name"])

    body_fields: list[str] = []
    body_param = None
    has_body = False
    body_required = False
    open_body = False
    request_body = op.get("requestBody")
    if request_body:
        has_body = True
        body_schema = (request_body.get("content", {}).get("application/json", {}) or {}).get("schema", {})
        inner = _without_null(body_schema)
        body_required = bool(request_body.get("required")) and inner is body_schema
        resolved = inner
        if "$ref" in inner:
            resolved = components.get(inner["$ref"].rsplit("/", 1)[1], {})
        if resolved.get("type") == "object" and isinstance(resolved.get("properties"), dict):
            open_body = resolved.get("additionalProperties") not in (None, False)
            for fname, fschema in resolved["properties"].items():
                body_fields.append(fname)
                if fname not in properties:  # path/query schema wins on a clash; the value goes to both
                    properties[fname] = fschema
            if body_required:
                required.extend(f for f in resolved.get("required", []) if f in body_fields)
        else:
            body_param = body_alias
            properties[body_alias] = body_schema
            body_fields.append(body_alias)
            if body_required:
                required.append(body_alias)

    input_schema: dict[str, Any] = {"type": "object", "properties": properties}
    if not open_body:
        input_schema["additionalProperties"] = False
    if required:
        input_schema["required"] = list(dict.fromkeys(required))
    defs = _defs_for(properties, components)
    input_schema = _rewrite_refs(input_schema)
    if defs:
        input_schema["$defs"] = defs
    return ToolRoute(name=name, method=method, path=path, description=_describe(op), input_schema=input_schema,
                     path_params=tuple(path_params), query_params=tuple(query_params),
                     body_fields=tuple(body_fields), has_body=has_body, body_required=body_required,
                     body_param=body_param, open_body=open_body)


def _without_null(schema: dict[str, Any]) -> dict[str, Any]:
    """The model inside an optional body (`anyOf: [{$ref}, {type: null}]`), else `schema` itself."""
    branches = schema.get("anyOf") or schema.get("oneOf")
    if not isinstance(branches, list):
        return schema
    rest = [b for b in branches if not (isinstance(b, dict) and b.get("type") == "null")]
    if len(rest) == 1 and len(rest) < len(branches) and isinstance(rest[0], dict):
        return rest[0]
    return schema


def tool_routes_from_openapi(doc: dict[str, Any]) -> dict[str, ToolRoute]:
    """Tools from a served OpenAPI document (for HTTP clients such as the benchmark's baseline)."""
    components = doc.get("components", {}).get("schemas", {})
    routes: dict[str, ToolRoute] = {}
    for path, item in doc.get("paths", {}).items():
        for method, op in item.items():
            if isinstance(op, dict) and op.get("operationId") and op["operationId"] not in routes:
                routes[op["operationId"]] = route_from_operation(op["operationId"], method.upper(), path, op, components,
                                                                 _body_alias_from_title(op))
    return routes


def _body_alias_from_title(op: dict[str, Any]) -> str:
    """The parameter name of a single non-object body, which the document gives only as its title
    (FastAPI titles `item_ids` as "Item Ids"); "body" when there is none."""
    body = (op.get("requestBody") or {}).get("content", {}).get("application/json", {}).get("schema") or {}
    title = body.get("title") if isinstance(body, dict) else None
    return title.lower().replace(" ", "_") if isinstance(title, str) and title.strip() else "body"


def example_arguments(schema: dict[str, Any], *, optional: bool = False) -> dict[str, Any] | None:
    """Arguments built from a tool schema's examples/defaults; None if a required one has neither."""
    args: dict[str, Any] = {}
    props = schema.get("properties", {})
    names = list(props) if optional else list(schema.get("required", []))
    required = set(schema.get("required", []))
    for name in names:
        prop = props.get(name, {})
        if "example" in prop:
            args[name] = prop["example"]
        elif "default" in prop and prop["default"] is not None:
            args[name] = prop["default"]
        elif isinstance(prop.get("examples"), list) and prop["examples"]:
            args[name] = prop["examples"][0]
        elif name in required:
            return None
    return args


READ_VERBS = frozenset({"list", "get", "search", "fetch", "find", "filter", "show", "view", "lookup", "read",
                        "count", "browse", "query", "describe"})


def looks_read_only(name: str) -> bool:
    """Tool names that start with a read verb (list_, get_, search_...): candidates for health checks."""
    return name.split("_", 1)[0].lower() in READ_VERBS


def _shadowing_route(app: Any, route: Any, method: str) -> str | None:
    """The name of an earlier route that HTTP routing picks for this route's requests, if any.

    Generated code sometimes declares `/items/{id}` before `/items/search`, or two handlers on the
    same method and path; over HTTP the later one is unreachable, and so it is here.
    """
    from starlette.routing import Match

    probe = route.path_format
    for name in route.param_convertors:
        probe = probe.replace("{" + name + "}", "1")
    scope = {"type": "http", "method": method, "path": probe, "root_path": "", "query_string": b"", "headers": []}
    for candidate in app.router.routes:
        match, _ = candidate.matches(scope)
        if match == Match.FULL:
            if candidate is route:
                return None
            return getattr(candidate, "operation_id", None) or getattr(candidate, "name", None) or candidate.path
    return None


class ArgumentError(ValueError):
    """Arguments that cannot even be turned into a request (not JSON, not an object, a name not taken)."""


def check_argument_names(tool: ToolRoute, args: dict[str, Any]) -> None:
    """Raise ArgumentError naming every argument `tool` does not take, and the names it does take."""
    if tool.open_body:
        return
    props = tool.input_schema.get("properties") or {}
    unknown = [k for k in args if k not in props]
    if not unknown:
        return
    accepted = list(props)
    hints = [f"{k!r} (did you mean {close[0]!r}?)" if (close := difflib.get_close_matches(k, accepted, 1, 0.75))
             else repr(k) for k in unknown]
    what = "Unknown argument" if len(unknown) == 1 else "Unknown arguments"
    raise ArgumentError(f"{what} {', '.join(hints)} for tool {tool.name!r}; accepted: "
                        f"{', '.join(accepted) if accepted else 'none (call it with {})'}")


def parse_arguments(arguments: dict[str, Any] | str | None) -> dict[str, Any]:
    """Accept a dict or a JSON object string (the agent's `call_tool(name, arguments)` form)."""
    if arguments is None or arguments == "":
        return {}
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError as exc:
            raise ArgumentError(f"arguments are not valid JSON: {exc.msg} at position {exc.pos}") from None
    if not isinstance(arguments, dict):
        raise ArgumentError(f"arguments must be a JSON object, got {type(arguments).__name__}")
    return arguments


def _query_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (dict, list)):
        return json.dumps(v)
    return str(v)


@dataclass(slots=True)
class HttpRequest:
    method: str
    path: str
    query: bytes
    body: bytes | None
    missing_path: list[str] = field(default_factory=list)


def to_request(tool: ToolRoute, args: dict[str, Any]) -> HttpRequest:
    """Flat arguments -> (method, path, query string, JSON body), as an HTTP client would send them."""
    path = tool.path
    missing: list[str] = []
    for name in tool.path_params:
        if name in args and args[name] is not None:
            path = path.replace("{" + name + "}", quote(_query_value(args[name]), safe=""))
        else:
            missing.append(name)
    pairs: list[tuple[str, str]] = []
    for name in tool.query_params:
        v = args.get(name)
        if v is None:
            continue
        if isinstance(v, list):
            pairs.extend((name, _query_value(x)) for x in v)
        else:
            pairs.append((name, _query_value(v)))
    body: bytes | None = None
    if tool.has_body:
        if tool.body_param is not None:
            if tool.body_param in args:
                body = json.dumps(args[tool.body_param]).encode()
        else:
            payload = {k: args[k] for k in tool.body_fields if k in args}
            if tool.open_body:
                known = set(tool.path_params) | set(tool.query_params) | set(tool.body_fields)
                payload.update((k, v) for k, v in args.items() if k not in known)
            if payload or tool.body_required:
                body = json.dumps(payload).encode()
    return HttpRequest(method=tool.method, path=path, query=urlencode(pairs).encode(), body=body,
                       missing_path=missing)
