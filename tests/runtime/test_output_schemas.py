"""Output schemas of `awm serve` for the response-model shapes generated code uses (in-process, no server)."""

from __future__ import annotations

from typing import Optional

from fastapi import FastAPI
from fastapi.responses import JSONResponse
from jsonschema import Draft202012Validator
from pydantic import BaseModel

from awm_rl.runtime.output_schemas import build_output_schemas
from awm_rl.runtime.tools import build_tool_routes


class Node(BaseModel):
    name: str
    children: list["Node"] = []


class Pet(BaseModel):
    id: int
    name: str


def _app() -> FastAPI:
    app = FastAPI()

    @app.get("/tree", operation_id="get_tree", response_model=Node)
    def get_tree():
        return {"name": "root", "children": [{"name": "leaf"}]}

    @app.get("/pet", operation_id="find_pet", response_model=Optional[Pet])
    def find_pet():
        return None

    @app.get("/count", operation_id="count_pets")
    def count_pets() -> int:
        return 2

    @app.get("/raw", operation_id="raw")
    def raw():
        return JSONResponse({"anything": 1})

    @app.post("/pets", operation_id="add_pet", response_model=Pet)
    def add_pet():
        return {"id": 1, "name": "a"}

    @app.post("/pets", operation_id="add_pet_twice", response_model=list[Pet])  # shadowed by add_pet
    def add_pet_twice():
        return []

    return app


def test_output_schema_shapes():
    app = _app()
    outs = build_output_schemas(app, build_tool_routes(app))
    # No response model: nothing promised; a shadowed route is answered by the other one: nothing either.
    assert set(outs) == {"get_tree", "find_pet", "count_pets", "add_pet"}
    for out in outs.values():
        Draft202012Validator.check_schema(out.schema)
        assert out.schema["type"] == "object"

    tree = outs["get_tree"]  # a recursive model: its schema at the root, itself in $defs for the recursion
    assert not tree.wrapped and tree.schema["required"] == ["name"] and "Node" in tree.schema["$defs"]
    assert tree.structured('{"name": "r", "children": [{"name": "c", "children": []}]}', 200)[1] is None
    content, error = tree.structured('{"name": "r", "children": [{"children": []}]}', 200)
    assert content is None and "$.children[0]" in error and "'name' is a required property" in error

    pet, count = outs["find_pet"], outs["count_pets"]  # nullable object and scalar: wrapped as {"result": ...}
    assert pet.wrapped and pet.meta == {"fastmcp": {"wrap_result": True}}
    assert pet.structured("null", 200) == ({"result": None}, None)
    assert pet.structured('{"id": 3, "name": "x"}', 200) == ({"result": {"id": 3, "name": "x"}}, None)
    assert count.schema["x-fastmcp-wrap-result"] is True and count.structured("2", 200) == ({"result": 2}, None)
    content, error = count.structured('"two"', 201)
    assert content is None and "HTTP 201" in error and "at $:" in error and "not of type 'integer'" in error
    content, error = outs["add_pet"].structured("Internal Server Error", 200)
    assert content is None and "the response is not JSON" in error
