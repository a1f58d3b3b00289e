"""Verifier records as the published AWM pipeline writes and reads them (what `awm export` must produce).

The published pipeline keeps its two verification modes in two files: sql mode (`verify_task`, evidence for
an LLM judge) in `gen_verifier.jsonl` and code mode (`verify_task_completion`, a verdict) in
`gen_verifier.pure_code.jsonl`. A record's `raw_response` is the model's JSON answer (`reasoning`,
`python_code`, `function_name`, `success_criteria`, `failure_criteria`). Its reader runs a record's code and
calls the function named on the FIRST line that, stripped, starts with `def verify_` (the mode's default name
only when there is none). Our synthesized verifiers hold both functions in one code string, so each mode gets a
record of its own whose code leads with that mode's function. Records imported from the published pipeline are
written back exactly as they came.
"""

from __future__ import annotations

import ast
import json
from typing import Any

from awm_resources.documents import CODE_FUNCTION, SQL_FUNCTION

FILE_FOR = {SQL_FUNCTION: "gen_verifier", CODE_FUNCTION: "gen_verifier.pure_code"}


def function_read_by_peer(code: str, default: str) -> str:
    """The function the published reader calls: the first stripped line `def verify_...(`, else `default`."""
    for line in code.split("\n"):
        line = line.strip()
        if line.startswith("def verify_") and "(" in line:
            return line.split("(")[0].replace("def ", "").strip()
    return default


def lead_with(code: str, function: str) -> str:
    """`code` changed so that its first `def verify_` line defines `function`, for a peer that calls the first one.

    The top-level definition moves in front of the statement holding that line (definitions only bind names, so
    the module behaves the same) when nothing in its header needs a later name (no decorators, constant
    defaults); otherwise a one-line declaration of the same name goes there, which the real definition below
    replaces when the module runs. Code that does not parse, or lacks the function, is returned unchanged."""
    if function_read_by_peer(code, "") == function:
        return code
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return code
    target = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == function), None)
    if target is None:
        return code
    lines = code.split("\n")
    first = next(i for i, line in enumerate(lines)
                 if line.strip().startswith("def verify_") and "(" in line)  # exists: the check above found one
    holder = next(n for n in tree.body if n.lineno <= first + 1 <= (n.end_lineno or n.lineno))
    at = min([holder.lineno, *(d.lineno for d in getattr(holder, "decorator_list", []))]) - 1
    defaults = [*target.args.defaults, *(d for d in target.args.kw_defaults if d is not None)]
    if target.decorator_list or not all(isinstance(d, ast.Constant) for d in defaults):
        declaration = f"def {function}(*args, **kwargs):  # declared first for readers that call the first verify_; defined below"
        return "\n".join(lines[:at] + [declaration, "    raise NotImplementedError", "", ""] + lines[at:])
    start, end = target.lineno - 1, target.end_lineno or target.lineno
    rest = lines[:start] + lines[end:]
    return "\n".join(rest[:at] + lines[start:end] + ["", ""] + rest[at:])


def _raw_response(entry: dict[str, Any], code: str, function: str) -> str:
    fields = {"reasoning": entry.get("reasoning") or "", "python_code": code, "function_name": function,
              "success_criteria": entry.get("success_criteria") or "", "failure_criteria": entry.get("failure_criteria") or ""}
    if entry.get("reference_solution"):
        fields["reference_solution"] = entry["reference_solution"]  # ours; a peer ignores keys it does not read
    return json.dumps(fields, ensure_ascii=False)


def published_records(entry: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(file stem, `verification` object) for each record `entry` (one stored verifier) becomes on export."""
    original = entry.get("verification")
    if isinstance(original, dict) and original.get("code") == entry.get("code"):
        return [(entry.get("file") or FILE_FOR[SQL_FUNCTION], original)]  # imported and unchanged: as it came
    code = entry.get("code")
    if not code:
        return []
    functions = entry.get("functions") or []
    out = []
    for function in (SQL_FUNCTION, CODE_FUNCTION):
        if function in functions:
            led = lead_with(code, function)
            out.append((FILE_FOR[function], {"code": led, "raw_response": _raw_response(entry, led, function)}))
    return out
