"""The package's structure as the guide's design page (docs/guide/design.md) draws it: no import cycles among the
modules, lazy imports included (what ``import structtorch`` loads is tested in test_imports.py)."""

from __future__ import annotations

import ast
from pathlib import Path

import structtorch

PACKAGE = Path(structtorch.__file__).parent


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, name: str, modules: set[str]) -> set[str]:
    """The structtorch modules that ``path`` imports, at its top level or inside functions (a lazy
    import closes a cycle as much as any other)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            targets = [f"{base}.{a.name}" for a in node.names] + [base]
        elif isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        else:
            continue
        found.update(t for t in targets if t in modules and t != name)
    return found


def _graph() -> dict[str, set[str]]:
    paths = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    modules = set(paths)
    graph = {}
    for name, path in paths.items():
        deps = _imports(path, name, modules)
        # importing a submodule runs its package's __init__ first: a package is not its own child's dependency
        graph[name] = {d for d in deps if not name.startswith(d + ".")}
    return graph


def test_no_import_cycles():
    graph = _graph()
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for dep in sorted(graph[node]):
            if state.get(dep) == 1:
                cycle = stack[stack.index(dep):] + [dep]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if dep not in state:
                visit(dep)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)



STRUCTURES = ("chain", "semimarkov", "lossaug")


def _private_structure_imports(path: Path, name: str) -> list[str]:
    """``module:name`` for each private module or name of a structure package that ``path`` imports."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.ImportFrom):
            continue
        base = node.module or ""
        if node.level:
            anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
            base = ".".join(anchor + ([base] if base else []))
        parts = base.split(".")
        if len(parts) < 2 or parts[0] != "structtorch" or parts[1] not in STRUCTURES:
            continue
        for alias in node.names:
            if any(p.startswith("_") for p in parts[2:]) or alias.name.startswith("_"):
                found.append(f"{base}:{alias.name}")
    return found


def test_layers_above_the_structures_use_their_public_names():
    """Distributions, losses, layers, training and the rest sit on the structures' public functions
    (and their validated types); only the structure packages share their private rooms."""
    offenders = {}
    for path in PACKAGE.rglob("*.py"):
        name = _module_name(path)
        if name.split(".")[1:2] and name.split(".")[1] in STRUCTURES:
            continue
        found = _private_structure_imports(path, name)
        if found:
            offenders[name] = found
    assert offenders == {}


def test_the_private_import_scan_can_fail(tmp_path):
    path = tmp_path / "probe.py"
    path.write_text("from .chain import _ops\nfrom .semimarkov._torch import guard\nfrom .chain.linear import viterbi\n")
    assert _private_structure_imports(path, "structtorch.probe") == [
        "structtorch.chain:_ops", "structtorch.semimarkov._torch:guard"]
