"""README.md and docs/*.md are the project's map: every repository path, Python name, link, `make` target,
`awm` command and `AWM_*` setting they name must exist, so that moving a module without updating the map fails here."""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path

import click
import pytest
import typer.main

from awm_assets.cli import app
from awm_resources.settings import INTERNAL_NAMES, variables

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
SPAN = re.compile(r"`([^`\n]+)`")
LINK = re.compile(r"\]\(([^)\s]+)\)")
PATHLIKE = re.compile(r"^\.?[\w-]+(?:/[\w.-]+)*/?$")
DOTTED = re.compile(r"^(awm_assets|awm_resources|awm_rl|benchmarks)(\.\w+)+$")
MAKE = re.compile(r"(?<![\w-])make ([a-z][\w-]*)")
SETTING = re.compile(r"\bAWM_[A-Z0-9_]*[A-Z0-9](?![\w{<])")
AWM = re.compile(r"(?<![\w/.-])awm ([a-z][\w-]*)(?: ([a-z][\w-]*))?")


def _ignore_patterns() -> list[str]:
    lines = (ROOT / ".gitignore").read_text(encoding="utf-8").splitlines()
    return [ln.strip().strip("/") for ln in lines if ln.strip() and not ln.startswith("#")]


IGNORED = _ignore_patterns()
TOP = {p.name for p in ROOT.iterdir() if p.name != ".git"}


def _generated(path: str) -> bool:
    """A path git ignores (a venv, the store, screenshots) is made at run time and need not exist."""
    parts = path.strip("/").split("/")
    prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    return any(fnmatch.fnmatch(p, pat) or fnmatch.fnmatch(p.rsplit("/", 1)[-1], pat)
               for p in prefixes for pat in IGNORED)


def _is_repo_path(token: str) -> bool:
    """A token whose first segment is a top-level entry of the repository (store files like `catalog.json`
    and outside paths like `../shared/...` are not)."""
    return bool(PATHLIKE.match(token)) and ("/" in token or "." in token) and token.split("/")[0] in TOP \
        and not _generated(token)


def _code(text: str) -> tuple[list[str], list[str], list[tuple[str, str]]]:
    """Code spans, words of fenced blocks, and (language, body) of each fenced block."""
    blocks = [(m.group(1), m.group(2)) for m in FENCE.finditer(text)]
    spans = SPAN.findall(FENCE.sub("", text))
    words = [w for _, body in blocks for w in body.split()]
    return spans, words, blocks


def _tree_paths(body: str) -> list[str]:
    """Paths of a layout block: names at the start of a line are at the root, names indented by two spaces
    inside the last root folder; the names are the words before the first run of two spaces (deeper lines
    continue a description)."""
    paths, parent = [], ""
    for line in body.splitlines():
        indent = len(line) - len(line.lstrip())
        names = re.split(r"\s{2,}", line.strip())[0].split() if line.strip() else []
        if indent == 0 and names:
            parent = names[0] if names[0].endswith("/") else ""
            paths += names
        elif indent == 2 and names and parent:
            paths += [parent + n for n in names]
    return [p for p in paths if "<" not in p]


def _dotted_missing(name: str) -> bool:
    """`pkg.module.Attr`: the longest module prefix must be a file or package, and the next part defined in it."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        base = ROOT.joinpath(*parts[:i])
        source = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
        if source.is_file():
            rest = parts[i:]
            return bool(rest) and not re.search(rf"\b{re.escape(rest[0])}\b", source.read_text(encoding="utf-8"))
    return True


def _make_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    return set(re.findall(r"^([a-z][\w-]*):", text, re.M))


def _awm_commands() -> dict[str, set[str] | None]:
    group = typer.main.get_command(app)
    ctx = click.Context(group)
    commands = {}
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        commands[name] = set(cmd.list_commands(ctx)) if hasattr(cmd, "list_commands") else None
    return commands


def _problems(doc: Path) -> list[str]:
    text = doc.read_text(encoding="utf-8")
    spans, words, blocks = _code(text)
    tokens = [t.rstrip(".,:;") for t in spans + words]
    problems = []
    paths = [t for t in tokens if _is_repo_path(t)]
    paths += [p for lang, body in blocks if lang == "text" for p in _tree_paths(body)]
    problems += [f"path {p}" for p in sorted(set(paths)) if not (ROOT / p).exists()]
    problems += [f"python name {t}" for t in sorted(set(tokens)) if DOTTED.match(t) and _dotted_missing(t)]
    for target in LINK.findall(text):
        path = target.split("#")[0]
        if path and not re.match(r"\w+://", path) and not (doc.parent / path).exists():
            problems.append(f"link {target}")
    code = "\n".join(spans + [body for _, body in blocks])
    targets = _make_targets()
    problems += [f"make {t}" for t in sorted(set(MAKE.findall(code))) if t not in targets]
    if doc.name != "configuration.md":  # generated from the settings, with a misspelt name as its example
        known = set(variables()) | set(INTERNAL_NAMES)
        problems += [f"setting {s}" for s in sorted(set(SETTING.findall(text))) if s not in known]
    commands = _awm_commands()
    for first, second in sorted(set(AWM.findall(code))):
        if first not in commands:
            problems.append(f"awm {first}")
        elif commands[first] is not None and second not in commands[first]:
            problems.append(f"awm {first} {second}")
    return problems


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_everything_a_document_names_exists(doc):
    assert _problems(doc) == [], f"{doc.relative_to(ROOT)} names what does not exist"


def test_the_map_is_short_and_links_every_document():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 160
    assert {p.name for p in DOCS[1:]} <= set(re.findall(r"\(docs/([\w-]+\.md)\)", readme))


def test_the_checks_catch_what_is_missing():
    """The helpers flag a moved module, a wrong target, a wrong subcommand; generated paths pass."""
    assert not (ROOT / "awm_rl/runtime/nothing.py").exists() and _is_repo_path("awm_rl/runtime/nothing.py")
    assert _dotted_missing("awm_rl.runtime.pool.NoSuchPool") and not _dotted_missing("awm_rl.runtime.pool.EnvironmentPool")
    assert not _is_repo_path(".venv/bfcl") and not _is_repo_path("tests/artifacts/ui/")
    assert not _is_repo_path("catalog.json") and not _is_repo_path("../shared/awm-corpus/generated")
    assert "demo" in _make_targets() and "nosuch" not in _make_targets()
    assert SETTING.findall("`AWM_LLM_<FIELD>_<STAGE>`, AWM_SCRATCH_MB_HOST, `_CHECK`") == ["AWM_SCRATCH_MB_HOST"]
    assert _awm_commands()["eval"] >= {"bfcl", "tau2"} and _awm_commands()["serve"] is None
    assert _tree_paths("awm_rl/   x\n  runtime/   y\n  agent/ reward/   z\n") == \
        ["awm_rl/", "awm_rl/runtime/", "awm_rl/agent/", "awm_rl/reward/"]
