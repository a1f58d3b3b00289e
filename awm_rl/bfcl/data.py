"""BFCL test cases from the installed `bfcl-eval` package (its own loaders, its bundled data).

`load_cases(category)` returns `BFCLCase`s built with BFCL's `load_dataset_entry` (which fills in
the function docs of a multi-turn case from `data/multi_turn_func_doc/` and holds back the
functions of a miss_func case until their turn) and `load_ground_truth_entry` (the possible
answers). Nothing is downloaded: the data ships inside the wheel.

`bfcl-eval` installs with `pip install --no-deps bfcl-eval` (its declared dependencies clash with
this stack; the multi-turn loaders, backends and checker need only the standard library, `filelock`
and `mpmath`). BFCL keeps file locks (and would keep results) under `BFCL_PROJECT_ROOT`, which
defaults to the site-packages folder; we point it at a folder of our own before the first import.
"""

from __future__ import annotations

import copy
import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MULTI_TURN_CATEGORIES = ["multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param", "multi_turn_long_context"]
# BFCL v3's single-turn categories (bfcl-eval's NON_LIVE + LIVE lists): one user request, answered by
# zero or more calls that are not executed; scored by BFCL's AST / relevance checkers.
NON_LIVE_CATEGORIES = ["simple_python", "simple_java", "simple_javascript", "multiple", "parallel", "parallel_multiple",
                       "irrelevance"]
LIVE_CATEGORIES = ["live_simple", "live_multiple", "live_parallel", "live_parallel_multiple", "live_irrelevance",
                   "live_relevance"]
SINGLE_TURN_CATEGORIES = NON_LIVE_CATEGORIES + LIVE_CATEGORIES
# Every category of BFCL v3 (the paper's Table 4 reports its overall); v4's agentic categories (web
# search, memory) need live services and are not run.
ALL_CATEGORIES = SINGLE_TURN_CATEGORIES + MULTI_TURN_CATEGORIES
CATEGORY_GROUPS = {"all": ALL_CATEGORIES, "multi_turn": MULTI_TURN_CATEGORIES, "single_turn": SINGLE_TURN_CATEGORIES,
                   "non_live": NON_LIVE_CATEGORIES, "live": LIVE_CATEGORIES}
# The paper's Table 4 (arXiv 2602.10090 v3, "Results across BFCLv3, τ2-bench, and MCP-Universe benchmarks"; Qwen3
# thinking models, BFCLv3 leaderboard Overall, %): base model -> after AWM training. τ²: awm_rl.tau2.data.PAPER_TAU2.
PAPER_TABLE4 = {"Qwen3-4B": (54.92, 64.50), "Qwen3-8B": (53.83, 65.94), "Qwen3-14B": (61.25, 70.18)}


class BFCLUnavailable(RuntimeError):
    """bfcl-eval is not installed (or a category it does not ship was asked for)."""


def _bfcl_root() -> Path:
    from awm_resources.settings import load_settings

    base = load_settings().paths.home or Path(tempfile.gettempdir())
    return base / "bfcl"


def ensure_bfcl() -> None:
    """Import bfcl-eval once, with BFCL_PROJECT_ROOT set to a writable folder of ours."""
    if "BFCL_PROJECT_ROOT" not in os.environ:
        root = _bfcl_root()
        root.mkdir(parents=True, exist_ok=True)
        os.environ["BFCL_PROJECT_ROOT"] = str(root)
    try:
        import bfcl_eval.utils  # noqa: F401 - the imports are the availability check
        from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_checker  # noqa: F401 - as above
    except ImportError as exc:
        raise BFCLUnavailable(
            f"bfcl-eval is not importable ({exc}); install it with `pip install --no-deps bfcl-eval mpmath` "
            "(see the Makefile's install target)") from exc


@dataclass
class BFCLCase:
    """One BFCL test entry with its possible answer, as BFCL's loaders return them."""

    id: str
    category: str
    entry: dict[str, Any]
    ground_truth: list[Any]
    index: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def turns(self) -> list[list[dict[str, Any]]]:
        return self.entry["question"]

    @property
    def missed_function(self) -> dict[str, list[dict[str, Any]]]:
        return self.entry.get("missed_function") or {}

    def functions_at(self, user_turn: int) -> list[dict[str, Any]]:
        """BFCL function docs available at a user turn (held-out functions join at their turn)."""
        docs = list(self.entry.get("function") or [])
        for turn, added in sorted(self.missed_function.items(), key=lambda kv: int(kv[0])):
            if int(turn) <= user_turn:
                docs.extend(added)
        return docs


def is_multi_turn(category: str) -> bool:
    return category.startswith("multi_turn")


def is_relevance(category: str) -> bool:
    """irrelevance / live_irrelevance / live_relevance: scored on whether any call was made (no possible answer)."""
    return "relevance" in category


def language_of(category: str) -> str | None:
    """java / javascript for BFCL's non-Python categories, else None."""
    return {"simple_java": "java", "simple_javascript": "javascript"}.get(category)


def expand_categories(spec: str) -> list[str]:
    """A category or a group name (all, multi_turn, single_turn, non_live, live) -> categories."""
    if spec in CATEGORY_GROUPS:
        return list(CATEGORY_GROUPS[spec])
    if spec not in ALL_CATEGORIES:
        raise BFCLUnavailable(f"unsupported BFCL category {spec!r}: use one of {', '.join(ALL_CATEGORIES)}, "
                              f"or a group: {', '.join(CATEGORY_GROUPS)}")
    return [spec]


def available_categories() -> list[str]:
    ensure_bfcl()
    from bfcl_eval.constants.category_mapping import LIVE_CATEGORY, MULTI_TURN_CATEGORY, NON_LIVE_CATEGORY

    return [c for c in ALL_CATEGORIES if c in set(NON_LIVE_CATEGORY + LIVE_CATEGORY + MULTI_TURN_CATEGORY)]


def load_cases(category: str, limit: int | None = None, ids: list[str] | None = None) -> list[BFCLCase]:
    """The category's test entries in BFCL's order (first `limit`, or those with the given ids)."""
    ensure_bfcl()
    from bfcl_eval.utils import load_dataset_entry, load_ground_truth_entry

    supported = available_categories()
    if category not in supported:
        raise BFCLUnavailable(f"unknown or unsupported BFCL category {category!r}: use one of {', '.join(supported)}")
    # Single-turn function docs get BFCL's language hints (Java/JavaScript types as strings), as its
    # inference harness shows them; relevance categories have no possible answers.
    entries = load_dataset_entry(category, include_prereq=False, include_language_specific_hint=not is_multi_turn(category))
    answers = {} if is_relevance(category) else {a["id"]: a["ground_truth"] for a in load_ground_truth_entry(category)}
    # The declared Java/JavaScript types (before BFCL's hint turns them into strings): the
    # ground-truth replay writes its values as literals of those types.
    raw = {} if language_of(category) is None else {
        e["id"]: {d["name"]: d for d in e["function"]}
        for e in load_dataset_entry(category, include_prereq=False, include_language_specific_hint=False)}
    cases = []
    for i, entry in enumerate(entries):
        if is_relevance(category):
            answers[entry["id"]] = []
        elif entry["id"] not in answers:
            raise BFCLUnavailable(f"{entry['id']}: no possible answer in bfcl-eval's data")
        cases.append(BFCLCase(id=entry["id"], category=category, entry=entry, ground_truth=answers[entry["id"]], index=i,
                              extra={"declared_functions": raw[entry["id"]]} if raw else {}))
    if ids:
        wanted = set(ids)
        cases = [c for c in cases if c.id in wanted]
    return cases[:limit] if limit else cases


# ------------------------------------------------------------------------------------- tool schemas
def _schema(prop: dict[str, Any]) -> dict[str, Any]:
    """A BFCL parameter description as JSON Schema (BFCL's own GORILLA_TO_OPENAPI type names)."""
    from bfcl_eval.constants.type_mappings import GORILLA_TO_OPENAPI

    out = {k: v for k, v in prop.items() if k not in ("type", "properties", "items", "required", "optional")}
    kind = prop.get("type")
    if kind == "any":
        pass  # any JSON value (BFCL's OpenAI mapping narrows it to string; the backends take anything)
    elif kind is not None:
        out["type"] = GORILLA_TO_OPENAPI.get(kind, "string")
    if "properties" in prop:
        out["properties"] = {k: _schema(v) for k, v in prop["properties"].items()}
        if isinstance(prop.get("required"), list):
            out["required"] = list(prop["required"])
    if isinstance(prop.get("items"), dict):
        out["items"] = _schema(prop["items"])
    if out.get("type") == "number" and isinstance(out.get("default"), int):
        out["default"] = float(out["default"])
    return out


def function_to_tool(doc: dict[str, Any]) -> dict[str, Any]:
    """A BFCL function doc as one entry of our `list_tools` answer: name, description, input schema."""
    params = copy.deepcopy(doc.get("parameters") or {})
    schema = _schema({**params, "type": "dict"})
    schema.setdefault("properties", {})
    schema.setdefault("required", [])
    tool = {"name": doc["name"], "description": doc.get("description", ""), "input_schema": schema}
    if doc.get("response"):
        tool["output_schema"] = _schema(doc["response"])
    return tool


def tools_json(docs: list[dict[str, Any]]) -> str:
    return json.dumps([function_to_tool(d) for d in docs], ensure_ascii=False)
