"""Markdown previews of stage artifacts and attempt histories, for asset metadata in the UI."""

from __future__ import annotations

import difflib
import json
import re
from typing import Any

from awm_resources.llm import quote
from awm_resources.sqlite_build import table_heads
from awm_resources.store import ArtifactStore


def _cut(text: str, n: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 1] + "…"


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def preview(store: ArtifactStore, key: str, stage: str, *, full: bool = True) -> str:
    """Markdown of a stage's artifact; `full=False` keeps it short (imports of thousands of scenarios)."""
    if stage == "tasks":
        tasks = store.read_json(key, "tasks.json")["tasks"]
        return "\n".join(f"{i}. {_cell(t)}" for i, t in enumerate(tasks))
    if stage == "db_schema":
        tables = store.read_json(key, "schema.json")["tables"]
        rows = ["| table | columns | indexes |", "|---|---|---|"]
        for t in tables:
            cols = [c.strip().split()[0] for c in t["ddl"].split("(", 1)[-1].rsplit(")", 1)[0].split(",\n")
                    if c.strip() and not c.strip().upper().startswith(("FOREIGN", "PRIMARY KEY", "UNIQUE", "CHECK", "CONSTRAINT"))]
            rows.append(f"| {t['name']} | {_cell(', '.join(cols))} | {len(t.get('indexes', []))} |")
        return "\n".join(rows)
    if stage == "sample_data":
        tables = store.read_json(key, "sample.json")["tables"]
        rows = ["| table | inserts | reasoning |", "|---|---|---|"]
        rows += [f"| {t['table_name']} | {len(t.get('insert_statements', []))} | {_cell(_cut(t.get('reasoning') or '', 120))} |" for t in tables]
        return "\n".join(rows) + ("\n\n" + sample_rows(store.path(key, "initial.db")) if full else "")
    if stage == "api_spec":
        spec = store.read_json(key, "api_spec.json")
        rows = ["| tool | method | path | summary |", "|---|---|---|---|"]
        rows += [f"| `{ep['operation_id']}` | {ep['method']} | `{ep['path']}` | {_cell(_cut(ep.get('summary', ''), 80))} |"
                 for g in spec["api_groups"] for ep in g["endpoints"]]
        return "\n".join(rows)
    if stage == "env_code":  # the whole file: researchers read the code the agent is trained against
        code = store.read_text(key, "server.py")
        shown = code if full else "\n".join(code.splitlines()[:60]) + "\n# ... (the whole file: server.py in the store)"
        return f"{len(code.splitlines())} lines\n\n" + fenced(shown, "python", limit=400_000)
    if stage == "verifiers":
        entries = store.read_json(key, "verifiers.json")["verifiers"]
        rows = ["| task | functions | success criteria |", "|---|---|---|"]
        rows += [f"| {e['task_idx']} | {', '.join(e.get('functions', []))} | {_cell(_cut(e.get('success_criteria') or '', 120))} |" for e in entries]
        code = [f"#### Task {e['task_idx']}: {_cell(_cut(e.get('task') or '', 200))}\n\n{fenced(e.get('code', ''), 'python', 20_000)}"
                for e in entries]
        return "\n".join(rows) + ("\n\n### Verifier code\n\n" + "\n\n".join(code) if full else "")
    raise KeyError(stage)


def sample_rows(db_path, per_table: int = 3, max_columns: int = 8) -> str:
    """The first rows of every table of the initial database (user 1's data first, as the sample data puts it)."""
    blocks = []
    for name, cols, rows, total in table_heads(db_path, per_table):
        cols = cols[:max_columns]
        lines = [f"**{name}** ({total} rows)", "", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
        lines += ["| " + " | ".join(_cell(_cut("NULL" if v is None else v, 40)) for v in row[:max_columns]) + " |"
                  for row in rows]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def fenced(text: Any, lang: str = "text", limit: int = 4000) -> str:
    """`text` verbatim in a code block (so `<module>`, `__dict__` and tracebacks survive Markdown), cut to
    `limit` characters with the cut said, the fence longer than any backtick run inside."""
    text = quote(str(text), head=limit * 2 // 3, tail=limit // 3)
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{lang}\n{text}\n{fence}"


def _artifact_text(artifact: Any) -> str:
    if isinstance(artifact, dict) and isinstance(artifact.get("code"), str):
        return artifact["code"]
    return json.dumps(artifact, indent=1, ensure_ascii=False, sort_keys=True)


def artifact_diff(failed: Any, corrected: Any, max_lines: int = 150) -> str:
    """Unified diff between a failed attempt's artifact and the one that passed (what the correction changed)."""
    lines = list(difflib.unified_diff(_artifact_text(failed).splitlines(), _artifact_text(corrected).splitlines(),
                                      "failed attempt", "corrected attempt", lineterm="", n=2))
    if len(lines) > max_lines:
        lines = lines[:max_lines] + [f"[... {len(lines) - max_lines} more diff lines ...]"]
    return "\n".join(lines)


def attempt_history(history: list[dict[str, Any]]) -> str:
    """Why each attempt failed and what the next prompt was told; for a corrected stage, the diff of the
    last failed artifact against the accepted one."""
    lines = []
    for rec in history:
        verdict = "passed" if rec.get("passed") else "failed"
        origin = " (the stored artifact)" if rec.get("source") == "stored" else ""
        lines.append(f"### Attempt {rec['attempt']}{origin}: {verdict}, error rate {rec.get('error_rate', 0):.0%}")
        for item, errs in (rec.get("errors") or {}).items():
            if not errs:
                continue
            label = "" if item == "_" else f" ({item})"
            shown = "\n\n".join(str(e) for e in errs[:5])
            more = f"\n\n[... {len(errs) - 5} more errors ...]" if len(errs) > 5 else ""
            lines.append(f"**Errors{label}:**\n\n{fenced(shown + more, limit=3000)}")
        for item, summary in (rec.get("error_summaries") or {}).items():
            label = "" if item == "_" else f" for {item}"
            lines.append(f"**Error summary given to the next attempt{label}:**\n\n{fenced(summary, limit=3000)}")
        lines.append("")
    passed = next((r for r in reversed(history) if r.get("passed") and r.get("artifact") is not None), None)
    failed = next((r for r in reversed(history) if not r.get("passed") and r.get("artifact") is not None
                   and passed is not None and r["attempt"] < passed["attempt"]), None)
    if passed and failed:
        diff = artifact_diff(failed["artifact"], passed["artifact"])
        if diff:
            lines.append(f"### What the correction changed (attempt {failed['attempt']} -> {passed['attempt']})\n\n"
                         f"{fenced(diff, 'diff', limit=12000)}")
    return "\n".join(lines)


def last_prompt(history: list[dict[str, Any]], limit: int = 8000) -> str:
    """The user message of the last attempt (first item), i.e. what the LLM was told; a cut is said."""
    prompts = history[-1].get("prompts") or {}
    if not prompts:
        return "(no LLM call in this attempt: all items were kept from the previous attempt)"
    item, messages = next(iter(prompts.items()))
    user = next((m["content"] for m in messages if m["role"] == "user"), "")
    label = "" if item == "_" else f" (item {item})"
    size = f"{len(user)} characters" + (f", shown cut to {limit}" if len(user) > limit else "")
    return f"Prompt{label} ({size}):\n\n{fenced(user, limit=limit)}"


def to_json(obj: Any) -> str:
    return json.dumps(obj, indent=2, ensure_ascii=False)
