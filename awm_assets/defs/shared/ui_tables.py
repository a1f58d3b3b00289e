"""Metadata the Dagster UI shows as tables and links instead of raw JSON (shared by the assets)."""

import re
from typing import Any, Sequence

import dagster as dg

_TYPES = {bool: "bool", int: "int", float: "float"}


def _column_type(values: list[Any]) -> str:
    kinds = {type(v) for v in values if v is not None}
    if kinds and kinds <= {int, bool} and kinds != {bool, int}:
        return _TYPES[next(iter(kinds))]
    if kinds and kinds <= {int, float}:
        return "float"
    return "string"


def records_table(records: Sequence[dict[str, Any]], columns: Sequence[str]) -> dg.MetadataValue:
    """Rows of `records` restricted to `columns`, typed from their values (None stays empty)."""
    types = {c: _column_type([r.get(c) for r in records]) for c in columns}
    rows = [dg.TableRecord({c: (r.get(c) if types[c] != "string" else ("" if r.get(c) is None else str(r.get(c))))
                            for c in columns}) for r in records]
    schema = dg.TableSchema(columns=[dg.TableColumn(c, types[c]) for c in columns])
    return dg.MetadataValue.table(records=rows, schema=schema)


def key_value_table(mapping: dict[str, Any]) -> dg.MetadataValue:
    """A two-column table (name, value) of a flat mapping, numbers shown as numbers."""
    rows = [{"metric": k, "value": round(float(v), 6) if isinstance(v, (int, float)) and not isinstance(v, bool) else None,
             "text": "" if isinstance(v, (int, float)) and not isinstance(v, bool) else str(v)}
            for k, v in mapping.items()]
    return records_table(rows, ["metric", "value", "text"])


def asset_link(asset: str, partition: str | None = None, label: str | None = None) -> str:
    """A Markdown link to an asset's page in the UI (relative, so it works behind any host and port)."""
    target = f"/assets/{asset}" + (f"?partition={partition}" if partition else "")
    return f"[{label or partition or asset}]({target})"


def bucket_order(name: str) -> tuple[int, str]:
    """'0-2 calls' < '3-5 calls' < '6-9 calls' < '10+ calls': buckets by their lower bound, not as strings."""
    head = re.match(r"\s*(\d+)", name)
    return (int(head.group(1)) if head else 10**9, name)


DIFFICULTY_COLUMNS = ("scenario", "task", "policy", "bucket", "pass_rate", "attempts", "completed", "partial",
                      "format_errors", "environment_errors", "mean_turns", "other_policies")


def difficulty_table(rows: Sequence[dict[str, Any]], limit: int = 1000) -> dg.MetadataValue:
    """Per-task difficulty rows (awm_resources.difficulty.latest_policy_view) as a table: attempted tasks first,
    hardest bucket first, then by pass rate; untried ones last; at most `limit` rows (a catalog of AWM-1K size has
    10,000 tasks: the bucket counts beside the table cover all)."""
    from awm_resources.difficulty import bucket_rank

    ordered = sorted(rows, key=lambda r: (r["attempts"] == 0, bucket_rank(r["bucket"]), r["pass_rate"] or 0.0,
                                          r["scenario"], r["task"]))
    return records_table(ordered[:limit], DIFFICULTY_COLUMNS)
