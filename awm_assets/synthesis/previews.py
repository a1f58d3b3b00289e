"""Markdown previews of stage artifacts and attempt histories, for asset metadata in the UI."""

from __future__ import annotations

import json
from typing import Any

from awm_resources.store import ArtifactStore


def _cut(text: str, n: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 1] + "…"


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def preview(store: ArtifactStore, key: str, stage: str) -> str:
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
        return "\n".join(rows)
    if stage == "api_spec":
        spec = store.read_json(key, "api_spec.json")
        rows = ["| tool | method | path | summary |", "|---|---|---|---|"]
        rows += [f"| `{ep['operation_id']}` | {ep['method']} | `{ep['path']}` | {_cell(_cut(ep.get('summary', ''), 80))} |"
                 for g in spec["api_groups"] for ep in g["endpoints"]]
        return "\n".join(rows)
    if stage == "env_code":
        code = store.read_text(key, "server.py")
        return f"```python\n{chr(10).join(code.splitlines()[:60])}\n# ... {len(code.splitlines())} lines in all\n```"
    if stage == "verifiers":
        entries = store.read_json(key, "verifiers.json")["verifiers"]
        rows = ["| task | functions | success criteria |", "|---|---|---|"]
        rows += [f"| {e['task_idx']} | {', '.join(e.get('functions', []))} | {_cell(_cut(e.get('success_criteria') or '', 120))} |" for e in entries]
        return "\n".join(rows)
    raise KeyError(stage)


def attempt_history(history: list[dict[str, Any]]) -> str:
    """Why each attempt failed and what the next prompt was told."""
    lines = []
    for rec in history:
        verdict = "passed" if rec.get("passed") else "failed"
        lines.append(f"### Attempt {rec['attempt']}: {verdict}, error rate {rec.get('error_rate', 0):.0%}")
        for item, errs in (rec.get("errors") or {}).items():
            label = "" if item == "_" else f" ({item})"
            for e in errs[:5]:
                lines.append(f"- error{label}: {_cut(e, 400)}")
            if len(errs) > 5:
                lines.append(f"- … {len(errs) - 5} more errors")
        for item, summary in (rec.get("error_summaries") or {}).items():
            label = "" if item == "_" else f" for {item}"
            lines.append(f"\n**Error summary given to the next attempt{label}:**\n\n> {_cut(summary, 2500)}")
        lines.append("")
    return "\n".join(lines)


def last_prompt(history: list[dict[str, Any]]) -> str:
    """The user message of the last attempt (first item), i.e. what the LLM was told."""
    prompts = history[-1].get("prompts") or {}
    if not prompts:
        return "(no LLM call in this attempt: all items were kept from the previous attempt)"
    item, messages = next(iter(prompts.items()))
    user = next((m["content"] for m in messages if m["role"] == "user"), "")
    label = "" if item == "_" else f" (item {item})"
    return f"Prompt{label}:\n\n```text\n{user[-6000:]}\n```"


def to_json(obj: Any) -> str:
    return json.dumps(obj, indent=2, ensure_ascii=False)
