"""The tool argument convention on the FastAPI shapes generated code uses, through the real host.

One small app (echo handlers: each returns what FastAPI handed it) is listed in this process with
`build_tool_routes` and called through `ScenarioHost` in the env-code worker (`check_env_code` runs each
"solution" call there and returns status and text). No argument may be dropped silently: an optional
body model is listed flat like a required one, and a name the tool does not take is a 4xx agent error.
"""

from __future__ import annotations

import json
import sqlite3
import sys
import types

import pytest

from awm_rl.agent.qwen3 import call_tool_turn, list_tools_turn, parse_response
from awm_rl.agent.validator import FormatValidator
from awm_rl.quality.envcheck import check_env_code
from awm_rl.runtime.tools import build_tool_routes, tool_routes_from_openapi

SHAPES_APP = '''
from typing import List, Optional

from fastapi import Body, FastAPI, Header, Query
from pydantic import BaseModel, ConfigDict, Field

app = FastAPI(title="argument shapes")


class Address(BaseModel):
    city: str
    zip: Optional[str] = None


class ItemIn(BaseModel):
    name: str = Field(..., description="Item name")
    quantity: int = 1
    address: Optional[Address] = None


class SprintIn(BaseModel):
    goal: Optional[str] = None
    move_to_sprint_id: Optional[int] = None


class TagIn(BaseModel):
    label: str


class NoteIn(BaseModel):
    model_config = ConfigDict(extra="allow")
    title: str


def dump(m):
    return None if m is None else m.model_dump()


@app.post("/items", operation_id="create_item")
def create_item(body: ItemIn):
    return {"body": dump(body)}


@app.post("/embedded", operation_id="create_embedded")
def create_embedded(item: ItemIn = Body(embed=True)):
    return {"item": dump(item)}


@app.post("/sprints/{sprint_id}/start", operation_id="start_sprint")
def start_sprint(sprint_id: int, payload: Optional[SprintIn] = None):
    return {"sprint_id": sprint_id, "payload": dump(payload)}


@app.post("/sprints/{sprint_id}/complete", operation_id="complete_sprint")
def complete_sprint(sprint_id: int, payload: SprintIn | None = None):
    return {"sprint_id": sprint_id, "payload": dump(payload)}


@app.post("/sprints/{sprint_id}/close", operation_id="close_sprint")
def close_sprint(sprint_id: int, payload: SprintIn = Body(None)):
    return {"sprint_id": sprint_id, "payload": dump(payload)}


@app.post("/pairs", operation_id="create_pair")
def create_pair(item: ItemIn, tag: TagIn):
    return {"item": dump(item), "tag": dump(tag)}


@app.post("/scores", operation_id="add_score")
def add_score(points: int = Body(...), reason: str = Body(...)):
    return {"points": points, "reason": reason}


@app.post("/bulk", operation_id="bulk_tags")
def bulk_tags(tags: List[TagIn]):
    return {"labels": [t.label for t in tags]}


@app.put("/items/{name}", operation_id="rename_item")
def rename_item(name: str, body: ItemIn, dry_run: bool = False, x_trace: Optional[str] = Header(None)):
    return {"path_name": name, "body": dump(body), "dry_run": dry_run}


@app.get("/items", operation_id="list_items")
def list_items(limit: int = Query(10), offset: int = 0, status: Optional[str] = None):
    return {"limit": limit, "offset": offset, "status": status}


@app.post("/notes", operation_id="create_note")
def create_note(body: NoteIn):
    return {"body": dump(body)}
'''

# (tool, arguments, expected status, expected JSON answer or a text the error must contain)
CALLS = [
    ("create_item", {"name": "cup", "address": {"city": "Oslo"}}, 200,
     {"body": {"name": "cup", "quantity": 1, "address": {"city": "Oslo", "zip": None}}}),
    ("create_embedded", {"item": {"name": "cup", "quantity": 2}}, 200,
     {"item": {"name": "cup", "quantity": 2, "address": None}}),
    # the optional body model, fields flat as the API spec lists them (the real model's complete_sprint call)
    ("start_sprint", {"sprint_id": 3, "goal": "Ship"}, 200,
     {"sprint_id": 3, "payload": {"goal": "Ship", "move_to_sprint_id": None}}),
    ("complete_sprint", {"sprint_id": 2, "move_to_sprint_id": 3}, 200,
     {"sprint_id": 2, "payload": {"goal": None, "move_to_sprint_id": 3}}),
    ("close_sprint", {"sprint_id": 2, "goal": "Done"}, 200,
     {"sprint_id": 2, "payload": {"goal": "Done", "move_to_sprint_id": None}}),
    ("start_sprint", {"sprint_id": 4}, 200, {"sprint_id": 4, "payload": None}),  # no field given: no body
    ("create_pair", {"item": {"name": "cup"}, "tag": {"label": "red"}}, 200,
     {"item": {"name": "cup", "quantity": 1, "address": None}, "tag": {"label": "red"}}),
    ("add_score", {"points": 5, "reason": "won"}, 200, {"points": 5, "reason": "won"}),
    ("bulk_tags", {"tags": [{"label": "a"}, {"label": "b"}]}, 200, {"labels": ["a", "b"]}),
    # a path param and a body field of the same name: one argument, its value sent to both
    ("rename_item", {"name": "mug", "quantity": 4, "dry_run": True}, 200,
     {"path_name": "mug", "body": {"name": "mug", "quantity": 4, "address": None}, "dry_run": True}),
    ("list_items", {"limit": 3, "status": "open"}, 200, {"limit": 3, "offset": 0, "status": "open"}),
    ("create_note", {"title": "t", "color": "red"}, 200, {"body": {"title": "t", "color": "red"}}),  # extra="allow"
    # names the tool does not take: a 422 agent error naming them and the accepted names
    ("list_items", {"limt": 5}, 422,
     "Unknown argument 'limt' (did you mean 'limit'?) for tool 'list_items'; accepted: limit, offset, status"),
    ("start_sprint", {"sprint_id": 3, "payload": {"goal": "Ship"}}, 422,
     "Unknown argument 'payload' for tool 'start_sprint'; accepted: sprint_id, goal, move_to_sprint_id"),
    ("rename_item", {"name": "mug", "x_trace": "abc", "totally_unknown_key": 1}, 422,
     "Unknown arguments 'x_trace', 'totally_unknown_key' for tool 'rename_item'"),
    ("create_item", {}, 422, '"loc":["body","name"]'),  # FastAPI's own 422 for a required body left out
]


def _app():
    module = sys.modules["awm_test_shapes"] = types.ModuleType("awm_test_shapes")  # pydantic resolves types there
    exec(compile(SHAPES_APP, "<shapes>", "exec"), module.__dict__)  # noqa: S102 - the test's own app
    return module.app


@pytest.fixture(scope="module")
def tools():
    return build_tool_routes(_app())


@pytest.fixture(scope="module")
def host_results(tmp_path_factory):
    """Every call of CALLS, each on a fresh instance of the app in the env-code worker."""
    work = tmp_path_factory.mktemp("shapes")
    sqlite3.connect(work / "initial.db").close()
    solutions = {i: {"calls": [{"tool": t, "arguments": a}]} for i, (t, a, _, _) in enumerate(CALLS)}
    check = check_env_code(SHAPES_APP, work / "initial.db", solutions=solutions, snapshot_dir=work / "snap")
    assert check.solutions, check.error
    return [check.solutions[str(i)]["calls"][0] for i in range(len(CALLS))]


def test_every_body_shape_is_listed_flat_and_closed(tools):
    schema = {name: t.input_schema for name, t in tools.items()}
    props = {name: list(s["properties"]) for name, s in schema.items()}
    assert props["create_item"] == ["name", "quantity", "address"] and schema["create_item"]["required"] == ["name"]
    assert "Address" in schema["create_item"]["$defs"]  # nested model: $ref into $defs
    assert props["create_embedded"] == ["item"] and props["create_pair"] == ["item", "tag"]
    for optional in ("start_sprint", "complete_sprint", "close_sprint"):  # listed like a required body model
        assert props[optional] == ["sprint_id", "goal", "move_to_sprint_id"], optional
        assert schema[optional]["required"] == ["sprint_id"], optional
    assert props["add_score"] == ["points", "reason"] and props["bulk_tags"] == ["tags"]
    assert props["rename_item"] == ["name", "dry_run", "quantity", "address"]  # no header parameter
    assert schema["rename_item"]["required"] == ["name"]
    assert all(s["additionalProperties"] is False for n, s in schema.items() if n != "create_note")
    assert "additionalProperties" not in schema["create_note"]  # the model itself takes extra keys


def test_openapi_document_gives_the_same_tools(tools):
    served = tool_routes_from_openapi(_app().openapi())
    assert {n: t.input_schema for n, t in served.items()} == {n: t.input_schema for n, t in tools.items()}


@pytest.mark.parametrize("i", range(len(CALLS)), ids=[f"{t}-{s}" for t, _, s, _ in CALLS])
def test_call_through_the_host(host_results, i):
    tool, args, status, expected = CALLS[i]
    got = host_results[i]
    assert got["status"] == status, got
    if isinstance(expected, dict):
        assert json.loads(got["text"]) == expected
    else:
        assert expected in got["text"], got["text"]


def test_validator_rejects_a_name_the_schema_does_not_take(tools):
    """The step validator needs no rule of its own: `additionalProperties: false` makes it an arguments_schema error."""
    validator = FormatValidator()
    assert validator.check(parse_response(list_tools_turn())).ok
    validator.record_tools([t.spec() for t in tools.values()])

    def check(name, args):
        return validator.check(parse_response(call_tool_turn("Reasoning.", name, args)))

    bad = check("complete_sprint", {"sprint_id": 2, "move_to": 3})
    assert bad.rule == "arguments_schema" and "'move_to'" in bad.detail and "move_to_sprint_id" in bad.detail
    assert check("complete_sprint", {"sprint_id": 2, "move_to_sprint_id": 3}).ok


def test_quality_probe_sends_only_accepted_names(tools, tmp_path):
    from awm_rl.quality.arguments import edge_sets, grounded_sets
    from awm_rl.quality.dbfacts import read_facts

    sqlite3.connect(tmp_path / "empty.db").close()
    facts = read_facts(tmp_path / "empty.db")
    for name, tool in tools.items():
        valid = grounded_sets(tool, facts)
        sent = [a.args for a in [*valid, *edge_sets(tool, facts, valid[-1].args)]]
        assert all(set(args) <= set(tool.accepted()) for args in sent), (name, sent)
        if name == "complete_sprint":  # the optional body's fields are probed too, flat
            assert any({"goal", "move_to_sprint_id"} <= set(args) for args in sent), sent
