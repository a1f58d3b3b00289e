"""The package layers go one way: awm_resources (core) <- awm_rl (runtime, RL) <- awm_assets (Dagster)."""

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
}


def _imported_tops(path: Path) -> set[tuple[str, int]]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {(a.name.split(".")[0], node.lineno) for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add((node.module.split(".")[0], node.lineno))
    return found


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_no_upward_imports(package):
    bad = [f"{p.relative_to(ROOT)}:{line} imports {top}"
           for p in sorted((ROOT / package).rglob("*.py"))
           for top, line in _imported_tops(p) if top in FORBIDDEN[package]]
    assert not bad, "imports against the layering:\n" + "\n".join(bad)


@pytest.mark.parametrize("module", ["awm_rl.runtime.pool", "awm_rl.training.job", "awm_rl.agent",
                                    "awm_rl.reward", "awm_resources.llm", "awm_resources.interop",
                                    "awm_rl.quality"])
def test_core_and_rl_load_no_dagster(module):
    code = (f"import sys, {module}; bad = sorted(m for m in sys.modules if m.split('.')[0] in "
            "('dagster', 'awm_assets')); print(bad); sys.exit(1 if bad else 0)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"importing {module} loads {proc.stdout.strip()} {proc.stderr[-2000:]}"
