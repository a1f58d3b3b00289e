"""The package layers go one way: awm_resources (core) <- awm_rl (runtime, RL) <- awm_assets (Dagster), whose
plain stage logic (awm_assets/synthesis) is Dagster-free; in awm_assets, only awm_assets.definitions imports every
domain (awm_assets/defs/<domain>) and only the in-process runner and the workspace import it."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# package -> top-level modules it must never import (directly, at any depth of its own files)
FORBIDDEN = {
    "awm_resources": {"dagster", "awm_rl", "awm_assets"},
    "awm_rl": {"dagster", "awm_assets"},
    "awm_assets/synthesis": {"dagster", "dagster_ray", "awm_assets.defs", "awm_assets.definitions"},
}


def _imports(path: Path) -> set[tuple[str, int]]:
    """(module, line) of every absolute import in the file, at any depth (function-level ones included)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {(a.name, node.lineno) for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found |= {(f"{node.module}.{a.name}", node.lineno) for a in node.names}
    return found


def _within(module: str, prefixes: set[str]) -> str | None:
    return next((p for p in prefixes if module == p or module.startswith(p + ".")), None)


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_no_upward_imports(package):
    bad = [f"{p.relative_to(ROOT)}:{line} imports {hit}"
           for p in sorted((ROOT / package).rglob("*.py"))
           for module, line in _imports(p) if (hit := _within(module, FORBIDDEN[package]))]
    assert not bad, "imports against the layering:\n" + "\n".join(bad)


def test_only_the_in_process_runner_imports_the_definitions():
    """definitions.py merges the domains; importing it back from a domain (or anything the domains use) is a cycle."""
    allowed = {ROOT / "awm_assets" / "inprocess.py"}
    bad = [f"{p.relative_to(ROOT)}:{line}" for p in sorted((ROOT / "awm_assets").rglob("*.py")) if p not in allowed
           for module, line in _imports(p) if _within(module, {"awm_assets.definitions"})]
    assert not bad, "modules importing awm_assets.definitions:\n" + "\n".join(bad)


def test_domains_do_not_import_each_other():
    """A domain (awm_assets/defs/<domain>) uses only itself, defs/shared and the layers below."""
    defs_dir = ROOT / "awm_assets" / "defs"
    domains = {p.name for p in defs_dir.iterdir() if (p / "__init__.py").is_file() and p.name != "shared"}
    bad = [f"{p.relative_to(ROOT)}:{line} imports {module}"
           for domain in sorted(domains) for p in sorted((defs_dir / domain).rglob("*.py"))
           for module, line in _imports(p)
           if _within(module, {f"awm_assets.defs.{d}" for d in domains - {domain}})]
    assert not bad, "imports between domains:\n" + "\n".join(bad)


# modules -> top-level packages that importing them must not load
SYNTHESIS = sorted(f"awm_assets.synthesis.{p.stem}" for p in (ROOT / "awm_assets" / "synthesis").glob("*.py")
                   if p.stem != "__init__")
NO_LOAD = {**{m: ("dagster", "awm_assets") for m in ("awm_rl.runtime.pool", "awm_rl.training.job", "awm_rl.agent",
                                                     "awm_rl.reward", "awm_resources.llm", "awm_resources.interop",
                                                     "awm_rl.quality")},
           ", ".join(SYNTHESIS): ("dagster",)}  # the plain stage logic, all its modules in one interpreter


@pytest.mark.parametrize("modules", sorted(NO_LOAD))
def test_core_rl_and_stage_logic_load_no_dagster(modules):
    code = (f"import sys, {modules}; bad = sorted(m for m in sys.modules if m.split('.')[0] in "
            f"{NO_LOAD[modules]!r}); print(bad); sys.exit(1 if bad else 0)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"importing {modules} loads {proc.stdout.strip()} {proc.stderr[-2000:]}"
