"""The package layers go one way: awm_resources (core) <- awm_rl (runtime, RL) <- awm_assets (Dagster), whose
plain stage logic (awm_assets/synthesis) is Dagster-free; in awm_assets, only awm_assets.definitions imports every
domain (awm_assets/defs/<domain>) and only the in-process runner and the workspace import it. Inside awm_rl the
packages are tiers (RL_PACKAGE_TIERS, the README's layout order): a package imports only tiers before its own. No module
imports itself back through others (function-local imports included; only `if TYPE_CHECKING:` imports, which never
run, are left out), and the settings module imports nothing of the project."""

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


PROJECT = ("awm_resources", "awm_rl", "awm_assets", "benchmarks")
MODULES = {".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p
           for pkg in PROJECT for p in (ROOT / pkg).rglob("*.py")}


def _type_checking_only(tree: ast.AST) -> set[int]:
    """Lines of imports under `if TYPE_CHECKING:` (for annotations only; they never run)."""
    return {n.lineno for node in ast.walk(tree) if isinstance(node, ast.If)
            and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"
            for stmt in node.body for n in ast.walk(stmt) if isinstance(n, (ast.Import, ast.ImportFrom))}


def _module_of(name: str) -> str | None:
    """The project module `name` is, or lives in (`pkg.mod.function` -> `pkg.mod`); None outside the project."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def project_imports(module: str) -> dict[str, int]:
    """The project modules `module` imports (at any depth, relative imports resolved) -> the first line."""
    path = MODULES[module]
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    skip = _type_checking_only(tree)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out: dict[str, int] = {}
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Import, ast.ImportFrom)) or node.lineno in skip:
            continue
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([node.module] if node.module else []))
            # `from pkg import sub` imports the submodule; `from mod import name` the module
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        for name in names:
            target = _module_of(name)
            if target and target != module:
                out.setdefault(target, node.lineno)
    return out


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


def _cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(graph[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(graph[child])))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_cycles():
    graph = {m: project_imports(m) for m in MODULES}
    cycles = _cycles(graph)
    detail = ["  " + " ; ".join(f"{a} -> {b} (line {graph[a][b]})" for a in c for b in graph[a] if b in c)
              for c in cycles]
    assert not cycles, "modules that import each other (directly or through others):\n" + "\n".join(detail)


def test_the_cycle_finder_finds_one():
    assert _cycles({"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}, "d": {"a": 1}}) == [["a", "b", "c"]]


def test_settings_import_nothing_of_the_project():
    """The bottom of the stack (as fastmcp's settings): every other module may read it, it reads none of them."""
    assert project_imports("awm_resources.settings") == {}


# awm_rl's packages and top-level modules, in tiers: each imports only tiers before its own (and awm_resources)
RL_PACKAGE_TIERS = [
    {"isolation"},
    {"agent"},
    {"runtime", "bfcl"},
    {"reward", "tau2", "mcp_universe"},
    {"quality"},
    {"evaluation"},
    {"training"},
    {"integrations"},
]


def test_awm_rl_packages_import_only_tiers_before_their_own():
    tier = {name: i for i, names in enumerate(RL_PACKAGE_TIERS) for name in names}
    units = {m.split(".")[1] for m in MODULES if m.startswith("awm_rl.") and m.count(".") >= 1}
    assert units == set(tier), f"awm_rl packages not placed in RL_PACKAGE_TIERS: {sorted(units ^ set(tier))}"
    bad = [f"{m}:{line} ({m.split('.')[1]}, tier {tier[m.split('.')[1]]}) imports {target} "
           f"({target.split('.')[1]}, tier {tier[target.split('.')[1]]})"
           for m in sorted(MODULES) if m.startswith("awm_rl.") and m.count(".") >= 1
           for target, line in project_imports(m).items()
           if target.startswith("awm_rl.") and target.count(".") >= 1 and target.split(".")[1] != m.split(".")[1]
           and tier[target.split(".")[1]] >= tier[m.split(".")[1]]]
    assert not bad, "imports against awm_rl's tiers (README, Layout):\n" + "\n".join(bad)
