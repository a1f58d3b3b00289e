"""Stage prompts, written from the AWM paper's rules (../shared/DESIGN.md, points 1-8).

Every builder returns chat messages. `corrections` are the error summaries of earlier failed attempts
of the same stage: they go into the regeneration prompt, which is the paper's self-correction loop.
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


def scenario_generation(seeds: list[dict[str, Any]], existing: list[str], n: int) -> list[dict[str, str]]:
    examples = "\n".join(f"- {s['name']}" + (f": {s['description']}" if s.get("description") else "") for s in seeds)
    taken = "\n".join(f"- {e}" for e in existing[:200]) or "(none yet)"
    return _messages(
        f"""Generate {n} new scenarios of stateful web applications, inspired by (not copies of) these seed sites:
{examples}

A scenario is one application whose core functions are create/read/update/delete operations over a
relational database: name it and describe, in 2-4 sentences, its entities and what a signed-in user does.
Vary domains; stay concrete. Give each a short snake_case `category` (e.g. e_commerce, developer_tools).
Avoid these scenarios, which we already have:
{taken}

Answer with JSON: {{"scenarios": [{{"name": str, "description": str, "category": str}}]}}""")


def scenario_classification(candidates: list[dict[str, str]]) -> list[dict[str, str]]:
    listing = "\n".join(f"- {c['name']}: {c['description']}" for c in candidates)
    return _messages(
        f"""For each scenario below, decide whether it is suitable for a simulated environment whose state is
a SQLite database and whose actions are CRUD API calls. Unsuitable: apps whose core is media rendering,
real-time hardware, pure computation, or anything without persistent user-owned records.

{listing}

Answer with JSON: {{"verdicts": [{{"name": str, "suitable": bool, "reason": str}}]}} (one per scenario, same names).""")


def tasks(name: str, description: str, n: int = 10, corrections: list[str] | None = None) -> list[dict[str, str]]:
    return _messages(
        f"""Scenario: {name}
{description}

Write {n} distinct user tasks for this application. Rules:
- Each is solvable purely through the application's API (no UI actions such as clicking or scrolling).
- The user is already signed in as user id 1: no login, registration, password or 2FA tasks.
- Concrete and self-contained: give every parameter (names, unique titles, amounts, dates, ids where natural).
- Mix reads and writes and difficulty (from one API call to about six).

Answer with JSON: {{"tasks": [str, ...]}}""", corrections)


def db_schema(name: str, description: str, task_list: list[str], corrections: list[str] | None = None) -> list[dict[str, str]]:
    return _messages(
        f"""Scenario: {name}
{description}

Tasks the database must support:
{_tasks_block(task_list)}

Design the SQLite schema, inferred from the tasks and holding only what they need. Rules:
- No authentication data (no passwords, tokens, sessions). User id 1 is the current user.
- Foreign keys (REFERENCES) and indexes for the columns tasks filter by; CHECK constraints where natural.
- Valid SQLite: one CREATE TABLE per table, then its CREATE INDEX statements.

Answer with JSON: {{"tables": [{{"name": str, "ddl": "CREATE TABLE ...", "indexes": ["CREATE INDEX ...", ...]}}]}}""",
        corrections)


def sample_data(name: str, description: str, task_list: list[str], schema_sql: str,
                corrections: list[str] | None = None) -> list[dict[str, str]]:
    return _messages(
        f"""{_context(name, description, task_list, schema_sql)}

Write INSERT statements for the initial state so that EVERY task is feasible from it. Rules:
- Rows that match and rows that do not match each task's filters; 5-10+ rows for anything listed.
- Existing targets for every update or delete a task asks for; user id 1 owns most of the data.
- Explicit ids, fixed timestamps (no datetime('now')), foreign-key order (parents first); they run with
  PRAGMA foreign_keys=ON.

Answer with JSON: {{"tables": [{{"table_name": str, "reasoning": str, "insert_statements": ["INSERT ...", ...]}}]}}""",
        corrections)


def api_spec(name: str, description: str, task_list: list[str], schema_sql: str,
             corrections: list[str] | None = None) -> list[dict[str, str]]:
    return _messages(
        f"""{_context(name, description, task_list, schema_sql)}

Design the minimal REST API that lets an agent complete every task. For each endpoint give: path, method,
summary, description, operation_id (snake_case; it becomes the tool name), tags, request_params
({{name: {{type, param_type: query|path|body, required, description, example}}}}), response (a JSON schema
sketch), required_tables and required_fields ({{table: [columns]}}). The current user is id 1; no auth endpoints.

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
- FastAPI + SQLAlchemy 2 ORM + Pydantic v2 models. ORM models match the schema exactly.
- `DATABASE_PATH = os.getenv("DATABASE_PATH", "app.db")` and, on one line,
  `engine = create_engine(f"sqlite:///{{DATABASE_PATH}}", connect_args={{"check_same_thread": False}})`;
  `Base.metadata.create_all(engine)` at import.
- Every endpoint of the spec, with `operation_id=` equal to the spec's, summary, description, tags and a
  response_model. GET/DELETE take path and query parameters; POST/PUT/PATCH take path parameters and ONE
  Pydantic body model. The current user is id 1. Missing records raise HTTPException(404) with a clear detail.
- End with `if __name__ == "__main__":` running uvicorn on `int(os.getenv("PORT", "8000"))`.

Answer with the complete file in one ```python block.""", corrections)


def verifier(name: str, task_idx: int, task: str, schema_sql: str, corrections: list[str] | None = None) -> list[dict[str, str]]:
    return _messages(
        f"""Scenario: {name}
Schema:
{schema_sql}

Task {task_idx}: {task}

Write a verifier for this task that compares the database before (initial) and after (final) an agent
acted. Define BOTH functions, standard library only, opening the databases read-only
(sqlite3.connect(f"file:{{path}}?mode=ro", uri=True)), without printing, writing files or network:
- `verify_task(initial_db_path: str, final_db_path: str) -> dict`: JSON-serialisable evidence for a judge
  (relevant rows before and after, what changed).
- `verify_task_completion(initial_db_path: str, final_db_path: str, final_answer: str | None = None) -> dict`:
  `{{"result": "complete"}}` or `{{"result": "others", "reason": str}}`. On an unchanged database it must not
  report "complete". For information-seeking tasks, check `final_answer` against the database.

Also write `reference_solution`: the tool calls (operation ids of the API, with JSON arguments taken from
the sample data) that complete the task from the initial state, and the final answer an agent would give.
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
    tool_text = "\n".join(f"- {t['name']}: {(t.get('description') or '').strip()[:300]}\n  input schema: "
                          f"{json.dumps(t.get('input_schema', {}), ensure_ascii=False)[:1500]}" for t in tools)
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

Answer with JSON: {{"reasoning": str, "calls": [{{"tool": str, "arguments": {{...}}}}], "final_answer": str | null}}""",
        corrections)


def error_summary(stage: str, error_text: str, artifact_excerpt: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"""We executed the output of the
`{stage}` stage and it failed. Summarise, in 200 to 500 tokens, what failed (which statements, lines or
functions), the root cause, and precisely how to fix it, so that the next generation avoids the mistake.

Errors:
{error_text}

The output that failed (excerpt):
{artifact_excerpt}"""}]
