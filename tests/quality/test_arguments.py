"""Grounding of probe arguments in a small hand-built database (awm_rl.quality.dbfacts / arguments)."""

from __future__ import annotations

import sqlite3
import warnings

import pytest

from awm_rl.quality.arguments import edge_sets, find_source, grounded_sets, retry_sets
from awm_rl.quality.dbfacts import looks_like_date, read_facts
from awm_rl.runtime.tools import ToolRoute, build_tool_routes

SCHEMA = """
CREATE TABLE users (
    id INTEGER PRIMARY KEY,
    username TEXT NOT NULL UNIQUE,
    email TEXT NOT NULL
);
CREATE TABLE playlists (
    id INTEGER PRIMARY KEY,
    user_id INTEGER NOT NULL REFERENCES users(id),
    name TEXT NOT NULL,
    track_count INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE tracks (
    id INTEGER PRIMARY KEY,
    title TEXT NOT NULL UNIQUE,
    duration_s INTEGER NOT NULL
);
CREATE TABLE playlist_tracks (
    playlist_id INTEGER NOT NULL REFERENCES playlists(id) ON DELETE CASCADE,
    track_id INTEGER NOT NULL REFERENCES tracks(id),
    position INTEGER NOT NULL,
    PRIMARY KEY (playlist_id, track_id)
);
CREATE TABLE products (
    id INTEGER PRIMARY KEY,
    sku TEXT NOT NULL,
    label TEXT NOT NULL,
    UNIQUE (sku, label)
);
CREATE TABLE orders (
    id INTEGER PRIMARY KEY,
    user_id INTEGER NOT NULL REFERENCES users(id),
    status TEXT NOT NULL
);
CREATE TABLE events (
    id INTEGER PRIMARY KEY,
    title TEXT NOT NULL,
    starts_at TEXT NOT NULL,
    day TEXT NOT NULL
);
CREATE TABLE repositories (
    id INTEGER PRIMARY KEY,
    owner_id INTEGER NOT NULL REFERENCES users(id),
    name TEXT NOT NULL
);
CREATE TABLE issues (
    id INTEGER PRIMARY KEY,
    repository_id INTEGER NOT NULL REFERENCES repositories(id),
    author_id INTEGER NOT NULL REFERENCES users(id),
    number INTEGER NOT NULL
);
CREATE TRIGGER playlist_track_added AFTER INSERT ON playlist_tracks
BEGIN
    UPDATE playlists SET track_count = track_count + 1 WHERE id = NEW.playlist_id;
END;
"""

ROWS = {
    "users": [(1, "alice", "alice@example.com"), (2, "bob", "bob@example.com"), (3, "carol", "carol@example.com")],
    "playlists": [(11, 2, "Bob's mix", 1), (12, 1, "Focus", 1), (13, 1, "Road trip", 1)],
    "tracks": [(21, "Blue Train", 643), (22, "So What", 562), (23, "Naima", 261)],
    # Row order differs from playlists/tracks order: values picked per column independently
    # ((11, 21), (12, 22), (13, 23)) would never form an existing pair.
    "playlist_tracks": [(11, 23, 1), (12, 21, 1), (13, 22, 1)],
    "products": [(31, "SKU-RED-1", "Red mug"), (32, "SKU-BLU-2", "Blue mug")],
    # user 2's order is inserted first: user 1's rows must still come first in the facts
    "orders": [(41, 2, "delivered"), (42, 1, "returned"), (43, 1, "delivered")],
    # A date-time in the "space" format and a date-only column
    "events": [(51, "Launch", "2024-05-01 18:30:00", "2024-05-01"),
               (52, "Retro", "2024-06-12 09:15:00", "2024-06-12")],
    # an issue's author is not its repository's owner
    "repositories": [(61, 2, "infra"), (62, 3, "web")],
    "issues": [(71, 61, 1, 1), (72, 62, 2, 1), (73, 61, 3, 2)],
}


@pytest.fixture(scope="module")
def facts(tmp_path_factory):
    path = tmp_path_factory.mktemp("facts") / "initial.db"
    conn = sqlite3.connect(path)
    conn.executescript(SCHEMA)
    for table, rows in ROWS.items():
        conn.executemany(f"INSERT INTO {table} VALUES ({', '.join('?' * len(rows[0]))})", rows)
    conn.commit()
    conn.close()
    return read_facts(path)


def tool(name: str, method: str, path: str, props: dict, required: list[str] | None = None,
         defs: dict | None = None) -> ToolRoute:
    schema: dict = {"type": "object", "properties": props}
    if required:
        schema["required"] = required
    if defs:
        schema["$defs"] = defs
    path_params = tuple(p for p in props if "{" + p + "}" in path)
    query_params = tuple(p for p in props if p not in path_params) if method in ("GET", "DELETE") else ()
    body_fields = tuple(p for p in props if p not in path_params and p not in query_params)
    return ToolRoute(name=name, method=method, path=path, description="", input_schema=schema,
                     path_params=path_params, query_params=query_params, body_fields=body_fields,
                     has_body=bool(body_fields), body_required=bool(body_fields))


def ids(table: str) -> set:
    return {r[0] for r in ROWS[table]}


# ------------------------------------------------------------------------------------ read_facts

def test_read_facts_tables_keys_and_values(facts):
    assert set(facts.tables) == set(ROWS)
    pt = facts.tables["playlist_tracks"]
    assert pt.columns == ["playlist_id", "track_id", "position"]
    assert pt.primary_key == ["playlist_id", "track_id"]
    assert pt.foreign_keys == {"playlist_id": ("playlists", "id"), "track_id": ("tracks", "id")}
    assert pt.cascades  # ON DELETE CASCADE
    assert not facts.tables["orders"].cascades
    assert facts.tables["tracks"].unique == [("title",)]
    assert facts.tables["products"].unique == [("sku", "label")]
    assert facts.tables["users"].primary_key == ["id"] and facts.tables["users"].unique == [("username",)]
    assert facts.tables["events"].types["starts_at"] == "TEXT"
    assert facts.tables["tracks"].types["duration_s"] == "INTEGER"
    for table, rows in ROWS.items():
        assert facts.tables[table].row_count == len(rows)
        assert len(facts.tables[table].rows) == len(rows)
    # user 1's rows come first in tables with a user_id column; the rest keep their rowid order
    assert [r["id"] for r in facts.tables["orders"].rows] == [42, 43, 41]
    assert [r["id"] for r in facts.tables["playlists"].rows] == [12, 13, 11]
    assert [r["id"] for r in facts.tables["tracks"].rows] == [21, 22, 23]
    # distinct values, most frequent first
    assert facts.tables["orders"].values("status") == ["delivered", "returned"]
    assert facts.tables["tracks"].max_int("id") == 23
    # the trigger on playlist_tracks writes playlists
    assert facts.triggers == {"playlist_tracks": ["playlists"]}
    assert [t.name for t, _ in facts.columns_named("USER_ID")] == ["orders", "playlists"]
    assert facts.table_for("playlist") is facts.tables["playlists"]
    assert facts.table_for("tracks") is facts.tables["tracks"]


def test_looks_like_date():
    for v in ("2024-05-01", "2024-05-01 18:30:00", "2024-05-01T18:30:00Z", "2024-05-01T18:30:00.123+02:00"):
        assert looks_like_date(v), v
    for v in ("05/01/2024", "2024-5-1", "yesterday", 20240501, None):
        assert not looks_like_date(v), v


# ------------------------------------------------------------------------------------ grounded_sets

def test_noun_id_parameter_gets_an_existing_id(facts):
    t = tool("get_playlist", "GET", "/playlists/{playlist_id}", {"playlist_id": {"type": "integer"}}, ["playlist_id"])
    sets = grounded_sets(t, facts)
    assert sets and all(s.valid for s in sets)
    assert {s.args["playlist_id"] for s in sets} <= ids("playlists")
    # several variants from different rows
    assert len({s.args["playlist_id"] for s in sets}) >= 2
    # a bare `id` takes its table from the path segment before it
    t2 = tool("get_track", "GET", "/tracks/{id}", {"id": {"type": "integer"}}, ["id"])
    assert {s.args["id"] for s in grounded_sets(t2, facts)} <= ids("tracks")


def test_two_ids_of_one_table_get_different_rows(facts):
    """`complete_sprint {sprint_id, move_to_sprint_id}`: the same id twice (a playlist moved into itself) is no valid input."""
    t = tool("move_playlist_tracks", "POST", "/playlists/{playlist_id}/move",
             {"playlist_id": {"type": "integer"}, "target_playlist_id": {"type": "integer"}}, ["playlist_id"])
    full = [s.args for s in grounded_sets(t, facts) if "target_playlist_id" in s.args]
    assert full and all(a["playlist_id"] != a["target_playlist_id"] for a in full), full
    assert {v for a in full for v in a.values()} <= ids("playlists")


def test_table_column_mention_in_description_is_followed(facts):
    prop = {"type": "string", "description": "Exact match on products.sku"}
    t = tool("lookup", "GET", "/lookup", {"q": prop}, ["q"])
    src = find_source("q", prop, t, facts, [])
    assert (src.table.name, src.column) == ("products", "sku")
    sets = grounded_sets(t, facts)
    assert sets and {s.args["q"] for s in sets} <= {r[1] for r in ROWS["products"]}
    # without the mention the same parameter matches nothing in the database
    bare = tool("lookup", "GET", "/lookup", {"q": {"type": "string"}}, ["q"])
    assert find_source("q", {"type": "string"}, bare, facts, []) is None
    assert not {s.args["q"] for s in grounded_sets(bare, facts)} & {r[1] for r in ROWS["products"]}


def test_join_table_parameters_come_from_one_row(facts):
    t = tool("remove_playlist_track", "DELETE", "/playlists/{playlist_id}/tracks/{track_id}",
             {"playlist_id": {"type": "integer"}, "track_id": {"type": "integer"}}, ["playlist_id", "track_id"])
    sets = grounded_sets(t, facts)
    pairs = {(r[0], r[1]) for r in ROWS["playlist_tracks"]}
    assert sets
    for s in sets:
        assert (s.args["playlist_id"], s.args["track_id"]) in pairs, s
    assert len({(s.args["playlist_id"], s.args["track_id"]) for s in sets}) >= 2


def test_enum_parameter_gets_an_enum_value(facts):
    enum = ["pending", "shipped", "cancelled"]  # none of them is stored in orders.status
    t = tool("list_orders", "GET", "/orders", {"status": {"type": "string", "enum": enum}}, ["status"])
    values = {s.args["status"] for s in grounded_sets(t, facts)}
    assert values and values <= set(enum)
    # the same through a $ref to a component schema, inside Optional[...]
    ref = tool("list_orders", "GET", "/orders",
               {"status": {"anyOf": [{"$ref": "#/$defs/OrderStatus"}, {"type": "null"}]}}, ["status"],
               defs={"OrderStatus": {"type": "string", "enum": enum, "title": "OrderStatus"}})
    values = {s.args["status"] for s in grounded_sets(ref, facts)}
    assert values and values <= set(enum)


def test_date_parameter_keeps_the_stored_format(facts):
    t = tool("list_events", "GET", "/events",
             {"starts_at": {"type": "string", "format": "date-time"},
              "since_date": {"type": "string", "format": "date"},
              "until_at": {"type": "string", "format": "date-time"}})
    stored_times = {r[2] for r in ROWS["events"]}
    stored_days = {r[3] for r in ROWS["events"]}
    full = [s for s in grounded_sets(t, facts) if s.kind.startswith("valid:all")]
    assert full
    for s in full:
        assert s.args["starts_at"] in stored_times  # a column of its own: a stored value
        # matched to no column: a value in the format the database stores ("YYYY-MM-DD HH:MM:SS", not ISO "T")
        assert s.args["until_at"] in stored_times, s.args
        assert s.args["since_date"] in stored_days, s.args


def test_create_repeats_a_unique_row_and_adds_a_fresh_one(facts):
    t = tool("create_track", "POST", "/tracks", {"title": {"type": "string"}, "duration_s": {"type": "integer"}},
             ["title", "duration_s"])
    sets = grounded_sets(t, facts)
    kinds = [s.kind for s in sets]
    assert kinds.count("edge:duplicate") == 1 and kinds.count("valid:fresh") == 1
    dup = next(s for s in sets if s.kind == "edge:duplicate")
    fresh = next(s for s in sets if s.kind == "valid:fresh")
    assert dup.args["title"] in {r[1] for r in ROWS["tracks"]}
    assert fresh.args["title"] not in {r[1] for r in ROWS["tracks"]}
    assert fresh.args["duration_s"] == dup.args["duration_s"]


def test_schema_example_is_used_when_no_column_matches(facts):
    t = tool("greet", "GET", "/greet", {"nickname": {"type": "string", "example": "Zed"}}, ["nickname"])
    assert {s.args["nickname"] for s in grounded_sets(t, facts)} == {"Zed"}


# ------------------------------------------------------------------------------------ edge_sets

def test_nonexistent_id_edge_set(facts):
    t = tool("get_playlist", "GET", "/playlists/{playlist_id}",
             {"playlist_id": {"type": "integer"}, "limit": {"type": "integer", "minimum": 1, "maximum": 50}},
             ["playlist_id"])
    base = next(s.args for s in grounded_sets(t, facts) if s.kind.startswith("valid:all"))
    edges = edge_sets(t, facts, base)
    missing = [e for e in edges if e.kind == "edge:nonexistent_id"]
    assert len(missing) == 1 and not missing[0].valid
    assert isinstance(missing[0].args["playlist_id"], int)
    assert missing[0].args["playlist_id"] not in ids("playlists")
    assert missing[0].args["limit"] == base["limit"]  # the rest of the arguments stay valid
    kinds = {e.kind: e.args for e in edges}
    assert kinds["edge:minimum:limit"]["limit"] == 1 and kinds["edge:maximum:limit"]["limit"] == 50
    assert any(k.startswith("edge:wrong_type:") for k in kinds)
    # a string key gets a string that is not a stored key
    s = tool("get_user", "GET", "/users/{user_id}", {"user_id": {"type": "string"}}, ["user_id"])
    miss = next(e for e in edge_sets(s, facts, {"user_id": "1"}) if e.kind == "edge:nonexistent_id")
    assert miss.args["user_id"] not in {str(i) for i in ids("users")}


# ------------------------------------------------------------------------------------ parameter examples

def test_parameter_level_examples_reach_the_input_schema():
    from fastapi import FastAPI, Path, Query

    app = FastAPI()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # `example=` is deprecated in FastAPI, and generated code still uses it

        @app.get("/shelves/{shelf_id}/books", operation_id="list_shelf_books")
        def list_shelf_books(shelf_id: int = Path(..., example=4),
                             genre: str = Query(..., example="x"),
                             author: str = Query(None, openapi_examples={"first": {"value": "Le Guin"}})):
            return {"books": []}

    props = build_tool_routes(app)["list_shelf_books"].input_schema["properties"]
    assert props["genre"]["example"] == "x"
    assert props["shelf_id"]["example"] == 4
    assert props["author"]["example"] == "Le Guin"


def test_read_facts_without_rowid_table(tmp_path):
    path = tmp_path / "kv.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE settings (key TEXT PRIMARY KEY, value TEXT) WITHOUT ROWID")
    conn.execute("INSERT INTO settings VALUES ('theme', 'dark')")
    conn.commit()
    conn.close()
    facts = read_facts(path)
    assert facts.tables["settings"].rows == [{"key": "theme", "value": "dark"}]


# ------------------------------------------------------------------------------------ where a tool works

def test_rows_come_one_of_each_state_first(tmp_path):
    """A tool that acts only on scheduled transfers meets one among the first rows it is given."""
    path = tmp_path / "states.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE transfers (id INTEGER PRIMARY KEY, user_id INTEGER, status TEXT)")
    conn.executemany("INSERT INTO transfers VALUES (?, ?, ?)", [
        (1, 1, "completed"), (2, 1, "completed"), (3, 1, "failed"), (4, 1, "completed"), (5, 1, "scheduled"),
        (6, 2, "scheduled")])
    conn.commit()
    conn.close()
    rows = read_facts(path).tables["transfers"].rows
    # user 1's rows first, one of each state before the rest, rowid order within a state
    assert [r["id"] for r in rows] == [1, 3, 5, 2, 4, 6]


def test_parameters_from_several_tables_come_from_linked_rows(facts):
    """`close_issue(owner, repo, issue_number)`: the repository the issue is in, and that repository's owner
    (reached through `owner_id`, two hops away), not the issue's author (one hop, through `author_id`)."""
    t = tool("close_issue", "POST", "/repos/{owner}/{repo}/issues/{issue_number}/close",
             {"owner": {"type": "string"}, "repo": {"type": "string"}, "issue_number": {"type": "integer"}},
             ["owner", "repo", "issue_number"])
    users = {r[0]: r[1] for r in ROWS["users"]}
    repos = {r[0]: (users[r[1]], r[2]) for r in ROWS["repositories"]}
    triples = {(*repos[r[1]], r[3]) for r in ROWS["issues"]}
    sets = grounded_sets(t, facts)
    assert sets and all((s.args["owner"], s.args["repo"], s.args["issue_number"]) in triples for s in sets), \
        [s.args for s in sets]


def test_pattern_gets_a_value_that_matches_it(facts):
    t = tool("events_on", "GET", "/events/on", {"when": {"type": "string", "pattern": r"^\d{4}-\d{2}-\d{2}$"}},
             ["when"])
    assert {s.args["when"] for s in grounded_sets(t, facts)} <= {r[3] for r in ROWS["events"]}


def test_retries_for_a_create_offer_fresh_unique_values(facts):
    t = tool("create_track", "POST", "/tracks", {"title": {"type": "string"}, "duration_s": {"type": "integer"}},
             ["title", "duration_s"])
    fresh = [s for s in retry_sets(t, facts) if s.kind.endswith("+fresh")]
    assert fresh and all(s.valid for s in fresh)
    assert not {s.args["title"] for s in fresh} & {r[1] for r in ROWS["tracks"]}
    # a rename too: the id stays one that exists, the new title is one no row holds
    rename = tool("rename_track", "PATCH", "/tracks/{track_id}", {"track_id": {"type": "integer"}, "title": {"type": "string"}},
                  ["track_id", "title"])
    fresh = [s for s in retry_sets(rename, facts) if s.kind.endswith("+fresh")]
    assert fresh and {s.args["track_id"] for s in fresh} <= ids("tracks")
    assert not {s.args["title"] for s in fresh} & {r[1] for r in ROWS["tracks"]}
