"""Stage prompts, written from the AWM paper's rules (../shared/DESIGN.md, points 1-8) and the requirements
the published pipeline states stage by stage, in our own words.

Every builder returns chat messages. `corrections` are the error summaries of earlier failed attempts
of the same stage: they go into the regeneration prompt, which is the paper's self-correction loop.

Deliberate differences from the published pipeline: its environments may not raise errors at all, so a
missing record comes back as null fields or an empty 200; ours answer 404 with a detail, 409 for a repeated
unique value and 422 for a forbidden value, because an agent learns from an error it can read and the
quality gate (awm_rl.quality) tells a client error from a server error; and its handlers may not use
try/except, while ours close their session in `finally`, so that a failed write never leaks a transaction.
"""

from __future__ import annotations

import json
from typing import Any

SYSTEM = ("You are a senior software engineer who builds realistic, self-contained simulations of web "
          "applications for training tool-use agents. Follow the output format exactly.")


def _messages(user: str, corrections: list[str] | None = None) -> list[dict[str, str]]:
    if corrections:
        notes = "\n\n".join(f"Attempt {i} failed. Summary of the error:\n{s}" for i, s in enumerate(corrections, 1))
        user += ("\n\n## Previous attempts\nYour earlier answers to this request failed when we executed them. "
                 f"Fix these problems and answer again in full.\n\n{notes}")
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


def _tasks_block(tasks: list[str]) -> str:
    return "\n".join(f"{i}. {t}" for i, t in enumerate(tasks))


def _context(name: str, description: str, task_list: list[str], schema_sql: str) -> str:
    """The scenario, its tasks and its schema: what every stage after the schema works from."""
    return f"Scenario: {name}\n{description}\n\nTasks:\n{_tasks_block(task_list)}\n\nSchema:\n{schema_sql}"


def scenario_generation(seeds: list[dict[str, Any]], existing: list[str], n: int,
                        categories: list[str] | None = None) -> list[dict[str, str]]:
    examples = "\n".join(f"- {s['name']}" + (f": {s['description']}" if s.get("description") else "") for s in seeds)
    taken = "\n".join(f"- {e}" for e in existing[-200:]) or "(none yet)"
    cats = ", ".join(categories or []) or "a short snake_case domain name"
    return _messages(
        f"""Generate {n} new scenarios of stateful web applications, inspired by (not copies of) these seed sites:
{examples}

The test of a good scenario: can its data be synthesized? Everything a user does must be reads and
writes of records that we can invent as rows of a relational database (users, items, orders, bookings,
messages, schedules, balances). Good: a clinic's appointment book, a team's expense reports, a gym's class
bookings, a marketplace's listings and offers. Not suitable: sites whose value is content we cannot
fabricate at scale (news, encyclopedias, video or music catalogues with playback), real-time data (live
prices, GPS tracking streams, sensor feeds), web search, or AI inference (chatbots, image generators).

For each scenario give a name, a description of 150 to 300 words (its entities and their relations, what
a signed-in user creates, reads, updates and deletes, and the rules the application enforces), and a
`category` from this list: {cats}. Vary the domains and stay concrete. Avoid these, which we already have:
{taken}

Answer with JSON: {{"scenarios": [{{"name": str, "description": str, "category": str}}]}}""")


def _weakness_block(focus: dict[str, Any]) -> str:
    """The weaknesses of a targeted batch, each with its numbers and a few failed tasks as evidence."""
    lines = []
    for w in focus.get("weaknesses", []):
        lines.append(f"- {w.get('dimension')} = {w.get('key')}: failed {w.get('failed')} of {w.get('episodes')} "
                     f"episodes ({w.get('fail_rate', 0):.0%})" + (f"; {w['note']}" if w.get("note") else ""))
        for ex in w.get("examples", [])[:3]:
            lines.append(f"    - {ex.get('scenario')} task {ex.get('task_idx')}: \"{ex.get('task')}\" -> "
                         f"{ex.get('mode')}" + (f" ({str(ex['detail'])[:160]})" if ex.get("detail") else ""))
    return "\n".join(lines) or "(none recorded)"


def targeted_scenario_generation(seeds: list[dict[str, Any]], existing: list[str], n: int, categories: list[str],
                                 focus: dict[str, Any]) -> list[dict[str, str]]:
    """Scenario generation aimed at what an evaluated agent fails at (`awm evolve`): the same rules and answer
    as `scenario_generation`, plus the weaknesses with their evidence and task styles that exercise them."""
    examples = "\n".join(f"- {s['name']}" + (f": {s['description']}" if s.get("description") else "") for s in seeds)
    taken = "\n".join(f"- {e}" for e in existing[-200:]) or "(none yet)"
    return _messages(
        f"""We train a tool-use agent on simulated stateful web applications. We evaluated it on our current
environments; it fails most at the skills below (dimension = value: failures, then failed tasks as evidence,
each with the way it failed):
{_weakness_block(focus)}

Failure modes: format_rule (broke the tool-call protocol), wrong_tool (called tools the task does not need
instead of the ones it does), bad_arguments (right tools, wrong or invalid arguments), gave_up (stopped or ran
out of turns before doing what was asked), environment_error (the environment failed). Task kinds: read
(answer from the data), write (create, update or delete), chain (find something, then act on it). Tool kinds:
read (get, list, search) and create, update, delete.

Generate {n} new scenarios of stateful web applications whose everyday workflows exercise exactly these weak
skills, so that an agent practising on them gets better at them. The environments the agent failed in (do not
copy them; a candidate too close to one is rejected):
{examples}

The test of a good scenario: can its data be synthesized? Everything a user does must be reads and
writes of records that we can invent as rows of a relational database (users, items, orders, bookings,
messages, schedules, balances). Not suitable: sites whose value is content we cannot fabricate at scale
(news, encyclopedias, media catalogues with playback), real-time data (live prices, GPS or sensor streams),
web search, or AI inference.

For each scenario give a name, a description of 150 to 300 words (its entities and their relations, what
a signed-in user creates, reads, updates and deletes, and the rules the application enforces), a
`category` from this list: {", ".join(categories)}, and `task_styles`: 3 to 5 kinds of user task, one
sentence each, that exercise the weak skills in this application (e.g. "find the oldest open order of a
named customer, then cancel it"). Avoid these, which we already have:
{taken}

Answer with JSON: {{"scenarios": [{{"name": str, "description": str, "category": str, "task_styles": [str]}}]}}""")


def scenario_classification(candidates: list[dict[str, str]], categories: list[str] | None = None) -> list[dict[str, str]]:
    listing = "\n".join(f"- {c['name']}: {c['description']}" for c in candidates)
    cats = ", ".join(categories or []) or "a short snake_case domain name"
    return _messages(
        f"""For each scenario below, decide whether it is suitable for a simulated environment whose state is
a SQLite database and whose actions are CRUD API calls, and file it under one category.
Suitable: the core of the application is persistent records a signed-in user creates, reads, updates and
deletes, and realistic data for them can be invented. Unsuitable: content-heavy sites (news, media
catalogues), real-time data or hardware, web search, AI inference, pure computation, or anything without
persistent user-owned records.
Categories (pick exactly one): {cats}

{listing}

Answer with JSON: {{"verdicts": [{{"name": str, "suitable": bool, "reason": str, "category": str}}]}}
(one per scenario, same names).""")


def tasks(name: str, description: str, n: int = 10, corrections: list[str] | None = None,
          styles: list[str] | None = None) -> list[dict[str, str]]:
    """`styles`: the task styles a targeted scenario was proposed with (what the agent must practise)."""
    focus = ("\nThis scenario exists to practise these kinds of task; make at least half of the tasks instances of "
             "them:\n" + "\n".join(f"- {s}" for s in styles) + "\n") if styles else ""
    return _messages(
        f"""Scenario: {name}
{description}
{focus}
Write {n} distinct user tasks for this application. Rules:
- One sentence each that carries every value the task needs (the title to create, the amount, the date,
  the name of the record to change): an agent must be able to act without asking back.
- Solvable purely through the application's API: no UI actions (clicking, scrolling, downloading a file,
  opening a page).
- The user is already signed in as user id 1: no login, logout, registration, password or 2FA tasks; tasks
  speak for that user.
- A range of difficulty: a few single lookups or edits, most needing two to five calls, and one or two that
  chain reads and writes across several resources (find something, then change it).
- A mix of reads (answer a question from the data) and writes (create, update, delete).

Answer with JSON: {{"tasks": [str, ...]}}""", corrections)


def db_schema(name: str, description: str, task_list: list[str], corrections: list[str] | None = None) -> list[dict[str, str]]:
    return _messages(
        f"""Scenario: {name}
{description}

Tasks the database must support:
{_tasks_block(task_list)}

Design the SQLite schema, inferred from the tasks and holding only what they need. Rules:
- SQLite types only (INTEGER, TEXT, REAL, BLOB); dates and times as TEXT in ISO 8601 ('YYYY-MM-DD HH:MM:SS').
- Every table has `id INTEGER PRIMARY KEY`, and `created_at` / `updated_at` columns
  (TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP) where rows change over time.
- A `users` table with profile fields only (id, username, email, display name and similar): no passwords,
  tokens, sessions or other authentication data. User id 1 is the current user.
- Foreign keys (REFERENCES) for every relation, UNIQUE where the domain demands it, CHECK constraints for
  enumerations, and indexes for the columns tasks filter or sort by.
- Valid SQLite: one CREATE TABLE per table, then its CREATE INDEX statements; no sample rows.

Answer with JSON: {{"tables": [{{"name": str, "ddl": "CREATE TABLE ...", "indexes": ["CREATE INDEX ...", ...]}}]}}""",
        corrections)


def sample_data(name: str, description: str, task_list: list[str], schema_sql: str,
                corrections: list[str] | None = None) -> list[dict[str, str]]:
    return _messages(
        f"""{_context(name, description, task_list, schema_sql)}

Write INSERT statements for the initial state so that EVERY task is feasible from it. Rules:
- For each task, the rows it reads, updates, deletes or aggregates exist (the record to rename, the order
  to cancel, enough rows for a total or a "most recent" to mean something), plus rows that do NOT match its
  filters, so that a careless agent can be wrong.
- Explicit column lists in every INSERT (`INSERT INTO t (a, b) VALUES (...)`) and explicit ids.
- Realistic, varied values spread over time (timestamps across weeks or months, fixed literals, never
  datetime('now')); names, amounts and texts that look like the real application's.
- User 1's rows first; user 1 owns most of the data the tasks touch, other users exist too.
- Parents before children (they run with PRAGMA foreign_keys=ON).
- At least 5 rows for anything listed, and as many more as the tasks need: feasibility comes first (every
  task's matching and non-matching rows), there is no upper limit per table.

Answer with JSON: {{"tables": [{{"table_name": str, "reasoning": str, "insert_statements": ["INSERT ...", ...]}}]}}""",
        corrections)


def api_spec(name: str, description: str, task_list: list[str], schema_sql: str,
             corrections: list[str] | None = None) -> list[dict[str, str]]:
    return _messages(
        f"""{_context(name, description, task_list, schema_sql)}

Design the REST API an agent uses to complete every task. Rules:
- Atomic, reusable CRUD endpoints over the schema's tables (list with filters, get one, create, update,
  delete), composed by the agent for multi-step tasks; not one endpoint per task.
- Exact table and column names of the schema; no authentication endpoints; no `user_id` parameters: the
  current user is id 1 and the server applies that itself.
- For each endpoint: path, method, summary (one line), description (one line: what it does and when to use
  it), operation_id (unique snake_case; it becomes the tool name), tags, request_params
  ({{name: {{type, param_type: query|path|body, required, description, example}}}}), response (every field
  with its type, description and an example; arrays with their item fields), required_tables and
  required_fields ({{table: [columns]}}).
- Examples and descriptions never give a task's answer away: no value a task states (a name, title, SKU,
  code, email, id) appears as an example or in a description; take examples from sample rows no task names,
  or neutral made-up values. The agent must look them up with the tools.

Answer with JSON: {{"api_groups": [{{"group_name": str, "endpoints": [...]}}]}}""", corrections)


def env_code(name: str, description: str, schema_sql: str, spec: dict[str, Any],
             corrections: list[str] | None = None) -> list[dict[str, str]]:
    return _messages(
        f"""Scenario: {name}
{description}

Schema:
{schema_sql}

API spec:
{json.dumps(spec, indent=1, ensure_ascii=False)}

Implement the whole API as ONE Python file. Rules:
- FastAPI + SQLAlchemy 2 ORM + Pydantic v2. ORM models for exactly the schema's tables and columns: where
  the spec and the schema disagree, the schema wins. ORM only, no raw SQL, with one exception: enforce
  foreign keys with `@event.listens_for(engine, "connect")` running `PRAGMA foreign_keys=ON` on each new
  connection (a violation then raises IntegrityError: answer 404 or 422 naming the missing record).
- `DATABASE_PATH = os.getenv("DATABASE_PATH", "app.db")` is a file path or a full SQLAlchemy URL (`sqlite:///...`,
  which other AWM tools pass): `DATABASE_URL = DATABASE_PATH if "://" in DATABASE_PATH else f"sqlite:///{{DATABASE_PATH}}"`
  and, on one line, `engine = create_engine(DATABASE_URL, connect_args={{"check_same_thread": False}})`;
  `Base.metadata.create_all(engine)` at import; the FastAPI app defined before any route.
- One session per request: open it in the handler, commit writes, close it in `finally`; read what the
  response needs before the session closes.
- Exactly one route per (method, path); every endpoint of the spec with `operation_id=` equal to the spec's,
  summary, description, tags and a response_model. GET/DELETE take path and query parameters; POST/PUT/PATCH
  take path parameters and, when the spec lists body fields, ONE Pydantic body model holding them (required
  fields `Field(...)`, optional ones with a default; a body of only optional fields is still that one model,
  e.g. `body: M | None = None`); an endpoint without body fields takes no body parameter. Every request and response field has
  `Field(..., description=..., examples=[...])`, its examples the spec's own. The current user is id 1, applied by the server.
- Dates and times: the schema stores them as TEXT in ISO 8601, so map those columns as `String` and store
  what arrives in the schema's format ('YYYY-MM-DD HH:MM:SS', or 'YYYY-MM-DD' for dates): validate it with
  `datetime.fromisoformat` (a bad value is a 422) and write the normalised string. Only a column the schema
  declares as DATETIME/TIMESTAMP is a `DateTime` column, and only that one takes a parsed `datetime`.
- Names that collide with SQLAlchemy or Python (`metadata`, `query`, `registry`, keywords such as `from`,
  `class`, `return`): use a safe attribute with the real column name, e.g. `metadata_ = Column("metadata", ...)`.
- Errors an agent can act on: HTTPException(404) with a clear detail for a missing record, 409 when a
  create or update would repeat a unique value (check first, or catch IntegrityError), 422 for a value the
  domain forbids. Nothing else may escape as a 500.
- End with `if __name__ == "__main__":` running uvicorn on `int(os.getenv("PORT", "8000"))`.

Answer with the complete file in one ```python block.""", corrections)


def verifier_rules() -> str:
    """What the verifier sandbox and the do-nothing check enforce, from their own definitions
    (`awm_rl.isolation.verifier_worker.allowed_imports`, `awm_rl.reward.audit.PROBE_ANSWERS`)."""
    from awm_rl.isolation.verifier_worker import allowed_imports
    from awm_rl.reward.audit import PROBE_ANSWERS

    probes = ", ".join("None" if a is None else json.dumps(a) for a in PROBE_ANSWERS)
    return (f"Imports: only these modules are importable (anything else fails the verifier): "
            f"{', '.join(allowed_imports())}.\n"
            f"The do-nothing agent: we run verify_task_completion on the UNCHANGED initial database (as both "
            f"initial and final) with each of these final answers: {probes}; every one of these runs must return "
            f"\"others\".")


def tools_block(tools: list[dict[str, Any]] | None) -> str:
    """Tools as agents see them (`ScenarioHost.list_tools`: name, description, input_schema) for a prompt,
    with what each returns where known (`context.tool_specs`)."""
    return "\n".join(f"- {t['name']}: {(t.get('description') or '').strip()[:300]}\n  input schema: "
                     f"{json.dumps(t.get('input_schema', {}), ensure_ascii=False)[:1500]}"
                     + (f"\n  returns: {json.dumps(t['returns'], ensure_ascii=False)[:600]}" if t.get("returns") else "")
                     for t in tools or [])


def verifier(name: str, task_idx: int, task: str, schema_sql: str, corrections: list[str] | None = None,
             database: str = "", tools: list[dict[str, Any]] | None = None) -> list[dict[str, str]]:
    data = f"\nInitial database content (excerpt):\n{database}\n" if database else ""
    tool_text = (f"\nTools of the environment (the current user is id 1; a tool answers JSON, an error as HTTP "
                 f"4xx with a detail):\n{tools_block(tools)}\n") if tools else ""
    return _messages(
        f"""Scenario: {name}
Schema:
{schema_sql}
{data}{tool_text}
Task {task_idx}: {task}

Write a verifier for this task that compares the database before (initial) and after (final) an agent
acted. Open the databases read-only (sqlite3.connect(f"file:{{path}}?mode=ro", uri=True)); no printing,
file writes or network.
{verifier_rules()}

1. SQL mode, `verify_task(initial_db_path: str, final_db_path: str) -> dict`: evidence for an LLM judge.
   Query the rows the task concerns in both databases and return them (before, after, and what changed) as
   JSON-serialisable values with clear keys. Do not decide anything here; the judge reads it with the
   success and failure criteria you write below.
2. Code mode, `verify_task_completion(initial_db_path: str, final_db_path: str, final_answer: str | None = None)
   -> dict`: the verdict itself, `{{"result": "complete"}}` or `{{"result": "others", "reason": str}}`, plus
   any details you like (what you found). Say "complete" only when you are certain the task is done as asked.
   - A task that changes data: the intended change happened (compare with the initial database, so that a
     row that already existed does not count) and nothing unrelated was damaged; an unchanged database is
     never "complete".
   - An information-seeking task (it changes nothing, so a correct agent leaves the database unchanged):
     the verdict rests on `final_answer`: "complete" only when it states what the database says (the values
     you query); no answer, or an answer without those values, is "others".
   Accept equivalent forms (case, whitespace, number formats) where a user would.

Also write `reference_solution`: the tool calls (tool names and arguments as listed above, with values taken
from the data above) that complete the task from the initial state, and the final answer an agent would give.
It is executed against the environment, and your `verify_task_completion` must then say "complete".

Answer with JSON: {{"reasoning": str, "success_criteria": str, "failure_criteria": str, "python_code": str,
"reference_solution": {{"calls": [{{"tool": str, "arguments": {{...}}}}], "final_answer": str | null}}}}""",
        corrections)


def env_code_repair(name: str, description: str, schema_sql: str, code: str, problems: list[str],
                    corrections: list[str] | None = None) -> list[dict[str, str]]:
    """Repair of stored env code (`awm repair`): the tools that fail, and edits instead of a rewrite."""
    listed = "\n".join(f"- {p}" for p in problems)
    return _messages(
        f"""Scenario: {name}
{description}

Schema:
{schema_sql}

This FastAPI environment serves tool-use agents, but when we called its tools with valid arguments
taken from its own database, these failed with a server error:
{listed}

Fix the root causes with the smallest change. Keep every route, operation_id, parameter and response
shape as it is; tools that work must keep working. Usual causes: strings written into DateTime columns
(parse ISO 8601 strings into datetime before they reach the ORM), a new row that repeats an existing
unique key (answer HTTPException 409 with a clear detail instead of crashing), a missing not-found check
(404), a NOT NULL column never filled, an ORM object used after its session was closed.

Answer with one or more edit blocks, each replacing lines that occur exactly once in the file:
<<<<<<< SEARCH
(lines copied exactly from the current file)
=======
(their replacement)
>>>>>>> REPLACE

Current file (server.py):
```python
{code}
```""", corrections)


def reference_solution(name: str, task_idx: int, task: str, tools: list[dict[str, Any]], verifier_code: str,
                       database: str, corrections: list[str] | None = None) -> list[dict[str, str]]:
    """A task's reference solution for an environment that came without one (`awm repair`)."""
    tool_text = tools_block(tools)
    return _messages(
        f"""Scenario: {name}

Task {task_idx}: {task}

Tools of the environment (the current user is id 1):
{tool_text}

Database before the agent acts:
{database}

The verifier that decides whether the task was done:
```python
{verifier_code}
```

Write the reference solution: the tool calls, in order, that a correct agent makes to complete the task
from this state, with concrete JSON arguments that match each tool's input schema and values taken from
the database (a row you create gets the next id after the largest existing id of its table), and the final
answer the agent gives the user (it matters for tasks that ask for information). We execute the calls on a
fresh copy of the environment and then run the verifier, which must say "complete".

When an earlier attempt's calls all answered 2xx and the verifier still did not say "complete" (see the
previous attempts below, with the verifier's returned dict and the rows that changed), decide who is at
fault and say why in `diagnosis`: "solution" (the calls or the answer were wrong: fix them), "verifier"
(the calls did the task and the verifier misjudges it, e.g. it reads the wrong database or miscounts: we then
rewrite the verifier with your diagnosis and run your calls again), or "data" (the initial database already
holds what the task asks for, so no change can count; or it lacks a row the task presupposes, such as a
named pet or booking of the current user). Otherwise `at_fault` is null. With "data", you may propose
`data_change`: UPDATE or DELETE statements on the initial database that take the task's target out of it
(alter or remove the rows that already hold it), or INSERT statements that add exactly the rows the task
presupposes (ids after the largest existing id of each table, every foreign key pointing at an existing row),
and give the `calls` that complete the task after that change. We keep the change only if every statement runs (foreign keys on), no verifier then passes
for an agent that does nothing, your calls then pass, and every task proven solvable before stays so.

Answer with JSON: {{"reasoning": str, "calls": [{{"tool": str, "arguments": {{...}}}}], "final_answer": str | null,
"at_fault": "solution" | "verifier" | "data" | null, "diagnosis": str | null, "data_change": [str]}}""",
        corrections)


def error_summary(stage: str, error_text: str, artifact_excerpt: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"""We executed the output of the
`{stage}` stage and it failed. Summarise, in 200 to 500 tokens, what failed (which statements, lines or
functions), the root cause, and precisely how to fix it, so that the next generation avoids the mistake.

Errors:
{error_text}

The output that failed (excerpt):
{artifact_excerpt}"""}]
