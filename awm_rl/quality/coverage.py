"""Write coverage: can any tool change what a task's verifier looks at?

A code-mode verifier that ignores the agent's final answer decides from the two databases alone.
If every table it reads is one that no tool can write, its verdict on the unchanged database
("others", or the audit would have caught it) can never change: the task is blocked. The tables a
tool can write are over-estimated on purpose (what the probe saw written, plus every table whose ORM
class or name a non-GET handler mentions, directly or through a helper, plus tables reached by
triggers, foreign-key cascades and ORM delete cascades), so a task is only called blocked when no tool could help.
"""

from __future__ import annotations

import ast
import re
import warnings

from awm_rl.quality.dbfacts import DbFacts

_SQL_TABLE = re.compile(r"\b(?:FROM|JOIN|INTO|UPDATE|TABLE)\s+[\"`\[]?([A-Za-z_][A-Za-z0-9_]*)", re.I)
_SQL_WRITE = re.compile(r"\b(?:INSERT\s+(?:OR\s+\w+\s+)?INTO|UPDATE|DELETE\s+FROM|REPLACE\s+INTO)\s+[\"`\[]?([A-Za-z_]\w*)", re.I)
_WRITE_METHODS = {"post", "put", "patch", "delete"}


def verifier_tables(code: str, tables: set[str]) -> set[str]:
    """Tables a verifier reads: named in its SQL or as a string of their own (e.g. a helper's argument)."""
    found = {m for m in _SQL_TABLE.findall(code) if m in tables}
    tree = _parse(code)
    if tree is None:
        return found
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            found |= {m for m in _SQL_TABLE.findall(node.value) if m in tables}
            if node.value in tables:
                found.add(node.value)
    return found


def _parse(code: str) -> ast.Module | None:
    """Parse generated code quietly (its invalid escape sequences are not our warnings to print)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return ast.parse(code)
        except SyntaxError:
            return None


def uses_final_answer(code: str) -> bool:
    """Does the verifier read the agent's final answer (then it may pass without any write)?"""
    tree = _parse(code)
    if tree is None:
        return True  # unknown: do not call the task blocked
    return any((isinstance(n, ast.Name) and n.id == "final_answer" and isinstance(n.ctx, ast.Load))
               or (isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.args.kwarg is not None)
               for n in ast.walk(tree))


def _orm_tables(tree: ast.Module) -> dict[str, str]:
    """ORM class name -> table name (`__tablename__`)."""
    out = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            for stmt in node.body:
                if (isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__tablename__"
                                                         for t in stmt.targets)
                        and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)):
                    out[node.name] = stmt.value.value
    return out


def _orm_cascades(tree: ast.Module, classes: dict[str, str]) -> dict[str, set[str]]:
    """Table -> tables an ORM relationship with a delete cascade writes when a row of it is deleted
    (`children = relationship("Child", cascade="all, delete-orphan")`): the handler never names them."""
    out: dict[str, set[str]] = {}
    for node in tree.body:
        if not isinstance(node, ast.ClassDef) or node.name not in classes:
            continue
        for call in ast.walk(node):
            if not (isinstance(call, ast.Call) and getattr(call.func, "id", getattr(call.func, "attr", None)) == "relationship"):
                continue
            cascade = next((k.value.value for k in call.keywords if k.arg == "cascade"
                            and isinstance(k.value, ast.Constant) and isinstance(k.value.value, str)), "")
            target = call.args[0] if call.args else None
            name = target.value if isinstance(target, ast.Constant) else getattr(target, "id", None)
            if isinstance(name, str) and name in classes and ("all" in cascade or "delete" in cascade):
                out.setdefault(classes[node.name], set()).add(classes[name])
    return out


def _is_write_route(fn: ast.AST) -> bool:
    for deco in getattr(fn, "decorator_list", []):
        target = deco.func if isinstance(deco, ast.Call) else deco
        if isinstance(target, ast.Attribute) and target.attr.lower() in _WRITE_METHODS:
            return True
        if isinstance(target, ast.Attribute) and target.attr == "api_route" and isinstance(deco, ast.Call):
            methods = next((k.value for k in deco.keywords if k.arg == "methods"), None)
            if methods is not None and any(isinstance(e, ast.Constant) and str(e.value).lower() in _WRITE_METHODS
                                           for e in getattr(methods, "elts", [])):
                return True
    return False


def static_writable_tables(env_code: str, facts: DbFacts) -> set[str]:
    """Tables a non-GET handler of `env_code` may write (see module docstring)."""
    tree = _parse(env_code)
    if tree is None:
        return set(facts.tables)
    classes = _orm_tables(tree)
    functions = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    names: set[str] = set()
    pending = [f for f in functions.values() if _is_write_route(f)]
    seen: set[str] = set()
    while pending:
        fn = pending.pop()
        if fn.name in seen:
            continue
        seen.add(fn.name)
        for node in ast.walk(fn):
            if isinstance(node, ast.Name):
                names.add(node.id)
                if node.id in functions and node.id not in seen:
                    pending.append(functions[node.id])
            elif isinstance(node, ast.Attribute):
                names.add(node.attr)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                names.update(_SQL_WRITE.findall(node.value))
    writable = {classes[n] for n in names if n in classes} | {n for n in names if n in facts.tables}
    cascades = _orm_cascades(tree, classes)
    pending_tables = list(writable)
    while pending_tables:  # ORM delete cascades, transitively
        for child in cascades.get(pending_tables.pop(), ()):
            if child not in writable:
                writable.add(child)
                pending_tables.append(child)
    return writable & set(facts.tables)


def close_over_side_effects(writable: set[str], facts: DbFacts) -> set[str]:
    """Add tables written by triggers and cascades of the writable ones."""
    out = set(writable)
    changed = True
    while changed:
        changed = False
        for t in list(out):
            for extra in facts.triggers.get(t, []):
                if extra not in out:
                    out.add(extra)
                    changed = True
        for table in facts.tables.values():
            if table.name not in out and any(ref[0] in out for ref in table.foreign_keys.values()):
                if table.cascades:
                    out.add(table.name)
                    changed = True
    return out


def blocked_reason(verifier_code: str, facts: DbFacts, writable: set[str]) -> str | None:
    """Why no tool sequence can satisfy this code-mode verifier, or None when one might."""
    if uses_final_answer(verifier_code):
        return None
    read = verifier_tables(verifier_code, set(facts.tables))
    if not read or read & writable:
        return None
    return (f"the verifier reads only table(s) {', '.join(sorted(read))}, which no tool writes "
            f"(tools can write: {', '.join(sorted(writable)) or 'nothing'})")
