"""Task-level truth on real AgentWorldModel-1K environments (../shared): each task linked to the tools and rows it
needs; blocked by a broken tool or a missing row, goal already met, proofs over the turn limit or only duplicating
a row, literals the tool listing gives away (issue 38 items 1, 2, 6)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from awm_rl.quality.literals import RowIndex, entity_nouns, task_literals
from awm_rl.quality.task_links import apply_links, link_tasks, tools_from_text


def _tasks(store, scenario: str) -> list[tuple[int, str]]:
    from awm_rl.reward.tasks import load_tasks

    return [(r.task_idx, r.task) for r in load_tasks(store, scenario)]


@pytest.fixture(scope="module")
def real_agent_store(agent_awm1k):
    """The two AWM-1K environments a strong model was run on as the agent, imported as `awm import` does (read only)."""
    from awm_resources.store import ArtifactStore

    return ArtifactStore(agent_awm1k)


def test_literal_roles_follow_the_words_around_them():
    nouns = entity_nouns(["pets", "bookings", "delivery_orders", "campaigns"])
    create = task_literals('Add a new pet record for my dog named "Milo" (Golden Retriever, male, 3 years old)', nouns)
    assert [(lit.text, lit.role) for lit in create if lit.kind == "text"] == [("Milo", "value")]
    request = task_literals('Request a booking for a 30-minute walk from the previous search for "Milo" on 2026-03-05',
                            nouns)
    assert next(lit for lit in request if lit.text == "Milo").role == "reference"
    order = next(lit for lit in task_literals('Mark order "BB-10482" as delivered at 2:46 PM', nouns))
    assert (order.text, order.kind, order.role, order.strong, order.noun) == ("BB-10482", "code", "reference", True,
                                                                              "order")
    update = task_literals('Update my campaign "Help Maya’s Recovery" by changing the goal amount to 15000 USD and '
                           'updating the location to "Round Rock, TX"', nouns)
    roles = {lit.text: (lit.role, lit.mine) for lit in update}
    assert roles["Help Maya’s Recovery"] == ("reference", True)
    assert roles["Round Rock, TX"][0] == "value"
    assert "00" not in {lit.text for lit in task_literals("between 6:00 PM and 7:00 PM", nouns)}  # clock times


def test_tools_a_task_names_are_read_from_its_text_and_the_spec():
    tools = {"create_one_time_donation_intent": {"description": "Create a one-time donation intent for a campaign"},
             "create_recurring_donation_intent": {"description": "Create a recurring monthly donation intent for a "
                                                                 "campaign"},
             "create_campaign": {"description": "Create a new fundraising campaign"},
             "create_campaign_update": {"description": "Post a campaign update"}}
    pledge = 'Create a recurring monthly pledge of 20 USD to the campaign "Wildfire Relief for Sonoma"'
    assert "create_recurring_donation_intent" in tools_from_text(pledge, tools)
    assert "create_one_time_donation_intent" not in tools_from_text(pledge, tools)
    # `post a campaign update` names the update tool, not create_campaign; quoted text names no tool
    post = 'Post a campaign update on "Help" with the title "Create a recurring donation"'
    assert tools_from_text(post, tools) == ["create_campaign_update"]


def test_the_gate_marks_blocked_and_goal_met_tasks_of_an_awm1k_environment(corpus_store):
    """gofundme (AWM pipeline output): its recurring-donation tool is shadowed, its receipt tool fails on every
    valid input, and the initial data already holds the campaign task 0 asks to create."""
    from awm_assets.synthesis.catalog import catalog_entry
    from awm_rl.quality.gate import scenario_quality

    result = scenario_quality(corpus_store, "gofundme")
    tasks = {t["task_idx"]: t for t in result["tasks"]}
    assert result["tools"]["create_recurring_donation_intent"]["status"] == "shadowed"
    pledge = tasks[5]
    assert "create_recurring_donation_intent" in pledge["needs_tools"] and pledge["needs_tools_from"] == "task text"
    assert "shadowed by create_one_time_donation_intent" in pledge["broken_tools"]["create_recurring_donation_intent"]
    receipt = tasks[7]
    assert (receipt["verdict"], receipt["blocked_by"]) == ("blocked", "tool")
    assert "fetch_donation_receipt_metadata" in receipt["reason"] and "HTTP 500" in receipt["reason"]
    created = tasks[0]
    assert created["verdict"] == "goal_met" and not created["eligible"]
    campaign = next(r for r in created["goal_met_rows"] if r["table"] == "campaigns")
    assert campaign["matches"]["title"] == "Help Maya’s Recovery" and "campaigns row" in created["reason"]
    # counted beside the paper's share, and left out of the catalog's training set
    assert result["blocked_by_tool"] >= 1 and result["goal_met"] >= 1
    assert result["share_blocked"] == round(sum(t["verdict"] == "blocked" for t in tasks.values()) / len(tasks), 4)
    entry = catalog_entry(corpus_store, "gofundme", result)
    assert {0, 7} <= set(entry["excluded_tasks"])
    assert entry["excluded_reasons"]["7"].startswith("blocked: needs tool fetch_donation_receipt_metadata")
    assert entry["task_truth"]["blocked_by_tool"] == result["blocked_by_tool"] and entry["task_truth"]["goal_met"] >= 1
    # the tool listing hands out the task's own values (item 6)
    leaks = {(a["literal"], a["tool"]) for a in created["answers_in_tools"]}
    assert ("Help Maya’s Recovery", "create_campaign") in leaks
    assert result["tasks_with_answers_in_tools"] >= 1


def test_missing_and_other_users_rows_block_a_task(corpus_store, real_agent_store):
    """rover task 2 books a walk for "Milo", whom no row holds (task 0 would create him); crowdfunding_platform_1
    task 3 acts for 'my nonprofit organization ORG-9823', which belongs to user 3."""
    rover = link_tasks(_tasks(corpus_store, "rover"), {}, {}, corpus_store.path("rover", "initial.db"))
    assert [m["literal"] for m in rover[2].get("missing_rows", [])] == ["Milo"]
    assert "missing_rows" not in rover[0]  # task 0 creates Milo: no presupposition
    crowd = link_tasks(_tasks(real_agent_store, "crowdfunding_platform_1"), {}, {},
                       real_agent_store.path("crowdfunding_platform_1", "initial.db"))
    reason = crowd[3]["missing_rows"][0]["reason"]
    assert "'ORG-9823'" in reason and "not the current user" in reason
    # gift cards labeled 'Holiday Giving 2026' for alice@ and bob@ are already stored (task 7's goal)
    rows = crowd[7]["goal_met_rows"]
    assert {r["matches"].get("recipient_email") for r in rows} >= {"alice@example.com", "bob@example.com"}
    tasks = [{"task_idx": i, "verdict": "ok", "eligible": True, "reason": "", "solvable": "unverified"}
             for i in (3, 7)]
    apply_links(tasks, crowd, {}, max_turns=20)
    assert [(t["verdict"], t.get("blocked_by")) for t in tasks] == [("blocked", "data"), ("goal_met", None)]


def _db(path: Path, rows: list[tuple]) -> Path:
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE rewards (id INTEGER PRIMARY KEY, member_id INTEGER, name TEXT, points INTEGER, "
                 "created_at TEXT)")
    conn.executemany("INSERT INTO rewards VALUES (?, ?, ?, ?, ?)", rows)
    conn.commit()
    conn.close()
    return path


def test_a_proof_over_the_turn_limit_or_only_duplicating_a_row_is_no_proof(tmp_path):
    existing = [(1, 7, "Free coffee", 100, "2026-01-01 10:00:00")]
    initial = _db(tmp_path / "initial.db", existing)
    copy = _db(tmp_path / "copy.db", [*existing, (2, 7, "Free coffee", 100, "2026-03-01 09:00:00")])
    real = _db(tmp_path / "real.db", [*existing, (2, 7, "Free muffin", 250, "2026-03-01 09:00:00")])
    task = "Create a reward 'Free coffee' worth 100 points for member 7"
    links = link_tasks([(0, task), (1, task), (2, task)], {}, {}, initial)
    call = {"tool": "create_reward", "arguments": {}, "status": 200, "error": None}
    runs = {"0": {"calls": [call], "initial_db": str(initial), "final_db": str(copy)},
            "1": {"calls": [call] * 19, "initial_db": str(initial), "final_db": str(real)},
            "2": {"calls": [call] * 18, "initial_db": str(initial), "final_db": str(real)}}
    tasks = [{"task_idx": i, "verdict": "ok", "eligible": True, "reason": "", "solvable": "yes"} for i in range(3)]
    apply_links(tasks, {i: {**links[i], "goal_met_rows": []} for i in links}, runs, max_turns=20)
    dup, long, fits = tasks
    assert (dup["solvable"], dup["verdict"]) == ("no", "goal_met")
    assert dup["goal_met_rows"][0]["matches"]["name"] == "Free coffee" and "copy of an existing" in dup["solution_detail"]
    assert (long["solvable"], long["over_turn_limit"], long["eligible"]) == ("unverified", True, True)
    assert "19 calls: 21 turns" in long["solution_detail"]
    assert (fits["solvable"], fits["verdict"]) == ("yes", "ok")  # 18 calls + list_tools + answer = 20 turns


def test_row_index_finds_money_as_cents_and_split_places(tmp_path):
    path = tmp_path / "db.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE campaigns (id INTEGER PRIMARY KEY, goal_amount_cents INTEGER, city TEXT, region TEXT)")
    conn.execute("INSERT INTO campaigns VALUES (1, 1500000, 'Round Rock', 'TX')")
    conn.commit()
    conn.close()
    index = RowIndex.read(path)
    lits = {lit.text: lit for lit in task_literals("set the goal to 15000 USD and the location to 'Round Rock, TX'",
                                                   entity_nouns(["campaigns"]))}
    assert index.find(lits["15000"]) == [("campaigns", 1, "goal_amount_cents")]
    assert index.find(lits["Round Rock, TX"]) == [("campaigns", 1, "round rock+tx")]


def test_the_spec_prompt_forbids_task_values_as_examples_and_the_check_finds_them(corpus_store):
    """Item 6: the API-spec prompt's rule, and the check that reports a task's literal in a tool's description,
    schema examples or the spec's examples (enum lists are allowed values, no answer)."""
    from awm_assets.synthesis import prompts
    from awm_rl.quality.task_links import answers_in_tools

    prompt = prompts.api_spec("s", "d", ["Create a coupon 'SPRING20'"], "CREATE TABLE coupons (...)")[-1]["content"]
    assert "never give a task's answer away" in prompt and "sample rows no task names" in prompt
    lits = task_literals("Create a coupon code 'SPRING20' for buyer 'ana@example.com' in category 'Home Decor'",
                         entity_nouns(["coupons"]))
    specs = {"create_coupon": {"description": "Create a coupon, e.g. SPRING20.",
                               "input_schema": {"properties": {"code": {"type": "string"},
                                                               "category": {"enum": ["Home Decor", "Garden"]}}}},
             "find_buyer": {"description": "Find a buyer by email.",
                            "input_schema": {"properties": {"email": {"examples": ["ana@example.com"]}}}}}
    found = {(a["literal"], a["tool"], a["where"]) for a in answers_in_tools(lits, specs, None)}
    assert found == {("SPRING20", "create_coupon", "description"), ("ana@example.com", "find_buyer", "schema")}
    # the AWM pipeline's own spec does it: gofundme's create_campaign example is task 0's title
    spec = corpus_store.read_json("gofundme", "api_spec.json")
    lits = task_literals('Create a new fundraising campaign titled "Help Maya’s Recovery"', entity_nouns(["campaigns"]))
    assert {"literal": "Help Maya’s Recovery", "tool": "create_campaign", "where": "api spec examples"} in \
        answers_in_tools(lits, {}, spec)


def test_an_update_already_in_the_rows_state_is_goal_met(tmp_path):
    """The update a task asks for is found as the state of the very row it names; a row in another state, or a
    task whose other values are not stored yet, is not."""
    path = tmp_path / "initial.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, user_id INTEGER, fulfillment_status TEXT, note TEXT)")
    conn.executemany("INSERT INTO orders VALUES (?, ?, ?, ?)", [(90517, 1, "fulfilled", None), (90518, 1, "manual", None)])
    conn.commit()
    conn.close()
    tools = {"update_order_fulfillment": {"status": "ok", "writes": ["orders"], "description": "Update an order's "
                                                                                                "fulfillment"}}
    links = link_tasks([(0, "For order ID 90517, change the fulfillment status to 'fulfilled'"),
                        (1, "For order ID 90518, change the fulfillment status to 'fulfilled'"),
                        (2, "For order ID 90517, change the fulfillment status to 'fulfilled' and add the note "
                            "'Sent via message'")], tools, {}, path)
    assert links[0]["needs_tools"] == ["update_order_fulfillment"]
    assert links[0]["goal_met_rows"] == [{"table": "orders", "rowid": 90517,
                                          "matches": {"id": 90517, "fulfillment_status": "fulfilled"}}]
    assert "goal_met_rows" not in links[1] and "goal_met_rows" not in links[2]
