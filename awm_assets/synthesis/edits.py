"""Search/replace edits to a stored file, as a repairing LLM answers them.

Repair asks for edits instead of the whole file: a 2,000-line environment is not rewritten (and
possibly truncated, or silently changed elsewhere) to fix a date parser. The format is the one coding
assistants use:

    <<<<<<< SEARCH
    exact lines of the current file
    =======
    their replacement
    >>>>>>> REPLACE

Each SEARCH text must occur exactly once in the file as edited so far. An answer without edits but
with a complete module in a code fence replaces the file (a model may prefer to rewrite a small one).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from awm_resources.llm import extract_code

_BLOCK = re.compile(r"^<{5,9} ?SEARCH[^\n]*\n(.*?)^={5,9}[ \t]*\n(.*?)^>{5,9} ?REPLACE[^\n]*$", re.S | re.M)


@dataclass
class EditResult:
    text: str
    applied: int = 0
    errors: list[str] = field(default_factory=list)
    whole_file: bool = False


def parse_edits(answer: str) -> list[tuple[str, str]]:
    """(search, replace) pairs in the order written."""
    return [(m.group(1), m.group(2)) for m in _BLOCK.finditer(answer)]


def _loose_find(text: str, search: str) -> list[tuple[int, int]]:
    """Spans of `search` in `text` comparing lines with trailing whitespace ignored."""
    want = [line.rstrip() for line in search.rstrip("\n").split("\n")]
    lines = text.split("\n")
    offsets, pos = [], 0
    for line in lines:
        offsets.append(pos)
        pos += len(line) + 1
    spans = []
    for i in range(len(lines) - len(want) + 1):
        if all(lines[i + j].rstrip() == want[j] for j in range(len(want))):
            end = offsets[i + len(want) - 1] + len(lines[i + len(want) - 1])
            spans.append((offsets[i], end))
    return spans


def apply_edits(text: str, answer: str, *, min_whole_file_ratio: float = 0.5) -> EditResult:
    """Apply the answer's edits to `text`; each failing edit is an error naming it, the rest still apply."""
    edits = parse_edits(answer)
    if not edits:
        try:
            code = extract_code(answer)
        except ValueError:
            code = ""
        if code.strip() and len(code) >= min_whole_file_ratio * len(text):
            return EditResult(code, whole_file=True)
        return EditResult(text, errors=["the answer contains no SEARCH/REPLACE edit blocks (and no complete file)"])
    result = EditResult(text)
    for n, (search, replace) in enumerate(edits, 1):
        first = next((line.strip() for line in search.splitlines() if line.strip()), "")
        if not search.strip():
            result.errors.append(f"edit {n}: empty SEARCH text")
            continue
        count = result.text.count(search)
        if count == 1:
            result.text = result.text.replace(search, replace, 1)
            result.applied += 1
            continue
        spans = _loose_find(result.text, search) if count == 0 else []
        if count == 0 and len(spans) == 1:
            start, end = spans[0]
            result.text = result.text[:start] + replace.rstrip("\n") + result.text[end:]
            result.applied += 1
        elif count > 1 or len(spans) > 1:
            result.errors.append(f"edit {n}: SEARCH text starting {first[:80]!r} occurs {max(count, len(spans))} "
                                 "times; include more surrounding lines so it matches exactly once")
        else:
            result.errors.append(f"edit {n}: SEARCH text starting {first[:80]!r} is not in the current file "
                                 "(copy the lines exactly as they are)")
    return result
