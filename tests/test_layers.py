"""The package's shape: one import root, layers that only point down, cheap imports of the pure modules.

Layers (docs/DESIGN.md, "Layout"), bottom to top:

    vcascade.core                                   imports only vcascade.core
    vcascade.edge | vcascade.broker | vcascade.center   import vcascade.core and themselves, never each other
    vcascade.app                                    may import anything

Read from the source with ``ast`` (no module is executed), so a new import that breaks a rule fails here
before it can build a cycle. Every ``import`` statement counts, including those inside functions: an import
written inside a function to dodge a cycle is itself a failure.

Beside the package, ``tools/`` (benchmarks and harnesses, not shipped) may import the package's public names only,
the package never imports ``tools``, and no file of ``tests/``, ``tools/`` or ``scripts/`` edits the import path
(tools run as ``python -m tools.x`` from the repository root, tests import ``tools.x``).
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE_DIRS = {"vcascade": REPO / "vcascade", "vcascade.edge": REPO / "edge", "vcascade.broker": REPO / "broker",
                "vcascade.center": REPO / "center"}
"""Where each top of the import tree lives in the repository (pyproject.toml's package-dir)."""
ALLOWED = {
    "core": {"core"},
    "edge": {"core", "edge"},
    "broker": {"core", "broker"},
    "center": {"core", "center"},
    "app": {"core", "edge", "broker", "center", "app"},
    "root": {"root", "app"},  # vcascade/__init__.py and __main__.py
}
NOT_SHIPPED = {"tools": REPO / "tools", "tests": REPO / "tests", "scripts": REPO / "scripts"}
"""Folders of Python beside the package: tools (imported by tests), the tests themselves, shell scripts' helpers."""
PURE_MODULES = ["vcascade.broker.dispatch", "vcascade.core.protocol.wire", "vcascade.edge.selection.roi_policy", "vcascade.center.stages.balance"]
HEAVY = ["torch", "cv2", "onnxruntime"]


def layer_of(module: str) -> str:
    """The layer of a dotted ``vcascade...`` module name: core, edge, broker, center, app, or root."""
    parts = module.split(".")
    if len(parts) == 1 or parts[1] in ("__main__",):
        return "root"
    if parts[1] not in ALLOWED:
        raise ValueError(f"{module}: not in a layer (vcascade.core, .edge, .broker, .center or .app)")
    return parts[1]


def source_modules() -> dict[str, Path]:
    """Every module of the package, by dotted name, from the folders pyproject.toml maps into it."""
    modules = {}
    for package, folder in PACKAGE_DIRS.items():
        for path in folder.rglob("*.py"):
            rel = path.relative_to(folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            name = ".".join([package, *parts])
            if package == "vcascade" and len(parts) > 0 and parts[0] in ("edge", "broker", "center"):
                raise AssertionError(f"{path}: a folder vcascade/{parts[0]} would shadow the repository's {parts[0]}/")
            modules[name] = path
    return modules


def imported_modules(path: Path, module: str) -> list[tuple[int, str]]:
    """``(line, absolute module name)`` of every vcascade import in the file, relative ones resolved."""
    found = []
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                found.append((node.lineno, f"{base}.{node.module}" if node.module else base))
            elif node.module:
                found.append((node.lineno, node.module))
    return [(line, name) for line, name in found if name == "vcascade" or name.startswith("vcascade.")]


def lazy_exported(path: Path, package: str) -> dict[str, str]:
    """``{public name: defining module}`` of a package ``__init__`` that re-exports with
    :func:`vcascade.core.exports.lazy_exports` (relative module names resolved); empty for any other file."""
    table = {}
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "lazy_exports" and len(node.args) == 2:
            names = node.args[1]
            assert isinstance(names, ast.Dict), f"{path}: lazy_exports takes a dict literal (read by this test)"
            for key, value in zip(names.keys, names.values):
                target = value.value
                table[key.value] = package + target if target.startswith(".") else target
    return table


def import_graph() -> dict[str, set[str]]:
    """Module -> the package modules it needs, read from every ``import`` statement, those under
    ``if TYPE_CHECKING:`` included. ``from P import x`` needs ``P.x`` when that is a module, the module ``P``
    lazily re-exports ``x`` from when ``P`` does (:func:`lazy_exported`), else ``P`` itself; a package's lazy
    re-exports are not imports of its own (they load on first use)."""
    modules = source_modules()
    lazy = {name: lazy_exported(path, name) for name, path in modules.items() if path.name == "__init__.py"}
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        needs = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                needs |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                    source = f"{base}.{node.module}" if node.module else base
                else:
                    source = node.module or ""
                for alias in node.names:
                    submodule = f"{source}.{alias.name}"
                    needs.add(submodule if submodule in modules else lazy.get(source, {}).get(alias.name, source))
        graph[module] = {target for target in needs if target in modules and target != module}
    return graph


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, targets = work[-1]
            target = next(targets, None)
            if target is not None:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                elif target in on_stack:
                    low[node] = min(low[node], index[target])
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
                    circles.append(sorted(component))
    return circles


def test_no_import_circle_not_even_for_type_checking():
    """No module needs itself through others, counting ``if TYPE_CHECKING:`` imports: an annotation-only import
    back up is still a circle between the modules' concepts (a cross-section check living in a section)."""
    circles = import_circles(import_graph())
    assert not circles, "import circles:\n" + "\n".join(" <-> ".join(c) for c in circles)


def test_the_circle_finder_sees_a_type_checking_import(tmp_path):
    """The finder itself: a circle closed only under ``if TYPE_CHECKING:`` is found, a chain is not."""
    assert import_circles({"a": {"b"}, "b": {"c"}, "c": set()}) == []
    assert import_circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    source = tmp_path / "m.py"
    source.write_text("from typing import TYPE_CHECKING\n"
                      "if TYPE_CHECKING:\n    from vcascade.core.schema.deployment import D\n")
    assert imported_modules(source, "vcascade.core.schema.ui") == [(3, "vcascade.core.schema.deployment")]


def test_every_import_points_down_or_sideways_within_a_component():
    broken = []
    for module, path in sorted(source_modules().items()):
        here = layer_of(module)
        for line, target in imported_modules(path, module):
            if target == "vcascade":
                continue  # the root holds only __version__
            if layer_of(target) not in ALLOWED[here]:
                broken.append(f"{path.relative_to(REPO)}:{line}: {here} module {module} imports {target}")
    assert not broken, "imports against the layers:\n" + "\n".join(broken)


def test_no_vcascade_import_inside_a_function():
    """An import of the package inside a function is how a cycle gets dodged; load lazily with
    :mod:`vcascade.core.exports` (package re-exports) or a registry of module names instead."""
    found = []
    for module, path in sorted(source_modules().items()):
        tree = ast.parse(path.read_text(), str(path))
        for func in ast.walk(tree):
            if not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(func):
                if isinstance(node, ast.Import | ast.ImportFrom):
                    names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or "."]
                    if node.__class__ is ast.ImportFrom and node.level or any(n.startswith("vcascade") for n in names):
                        found.append(f"{path.relative_to(REPO)}:{node.lineno} in {func.name}()")
    assert not found, "function-local imports of vcascade modules:\n" + "\n".join(found)


def test_the_layer_checks_catch_a_component_importing_another(tmp_path):
    """The rules themselves: an edge module importing the center is refused, the app may import both."""
    bad = tmp_path / "bad.py"
    bad.write_text("import os\nfrom vcascade.center.worker import run_worker\n")
    imports = imported_modules(bad, "vcascade.edge.bad")
    assert imports == [(2, "vcascade.center.worker")]
    assert layer_of(imports[0][1]) not in ALLOWED["edge"]
    assert layer_of(imports[0][1]) in ALLOWED["app"]
    relative = tmp_path / "rel.py"
    relative.write_text("from ..broker import dispatch\n")
    assert imported_modules(relative, "vcascade.edge.rel") == [(1, "vcascade.broker")]


@pytest.mark.parametrize("module", PURE_MODULES)
def test_importing_a_pure_module_loads_no_heavy_library(module):
    code = f"import sys, {module}; print(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "", f"import {module} loaded {out}"


def test_importing_the_package_loads_nothing_else():
    code = "import sys, vcascade; print(sorted(m for m in sys.modules if m.startswith('vcascade')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "['vcascade']"


def test_pyproject_lists_every_package_folder():
    """setuptools builds only the packages pyproject.toml lists: a new folder missing there would be missing
    from the wheel while the editable install still finds it."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert config["package-dir"] == {k: v.name for k, v in PACKAGE_DIRS.items() if k != "vcascade"}
    on_disk = {name for name, path in source_modules().items() if path.name == "__init__.py"}
    assert sorted(config["packages"]) == sorted(on_disk)


def test_the_wheel_has_one_top_level_name(tmp_path):
    """Built from a copy of the sources: the wheel holds ``vcascade/`` and its metadata, nothing else
    (no top-level ``edge``, ``broker`` or ``center`` to clash with other distributions)."""
    src = tmp_path / "src"
    shutil.copytree(REPO, src, ignore=shutil.ignore_patterns(".git", ".venv", "out", "build", "*.egg-info",
                                                               "__pycache__", "tests", "docs", "deploy"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(tmp_path / "dist"), str(src)], check=True, capture_output=True)
    (wheel,) = (tmp_path / "dist").glob("vcascade-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {name.split("/")[0] for name in names}
    assert top == {"vcascade", f"{wheel.name.split('-')[0]}-{wheel.name.split('-')[1]}.dist-info"}
    for module, path in source_modules().items():
        assert module.replace(".", "/") + ("/__init__.py" if path.name == "__init__.py" else ".py") in names
    static = REPO / "vcascade" / "app" / "ui" / "static"  # the live view's page ships without a build step
    for page_file in static.iterdir():
        assert f"vcascade/app/ui/static/{page_file.name}" in names


def _imports_of(path: Path) -> list[tuple[int, str, list[str]]]:
    """``(line, module, names)`` of every absolute import in the file (``names`` empty for ``import x``)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.append((node.lineno, node.module, [alias.name for alias in node.names]))
    return found


def test_the_package_never_imports_tools():
    found = [f"{path.relative_to(REPO)}:{line}: imports {name}" for path in source_modules().values()
             for line, name, _ in _imports_of(path) if name == "tools" or name.startswith("tools.")]
    assert not found, "the package imports tools/ (not shipped in the wheel):\n" + "\n".join(found)


def test_tools_import_only_public_names_of_the_package():
    """A tool reaching for ``_private`` names ties the product to its tools; what a tool needs is public."""
    found = []
    for path in sorted(NOT_SHIPPED["tools"].rglob("*.py")):
        for line, module, names in _imports_of(path):
            if module == "vcascade" or module.startswith("vcascade."):
                private = [p for p in [*module.split("."), *names] if p.startswith("_") and p != "__version__"]
                if private:
                    found.append(f"{path.relative_to(REPO)}:{line}: from {module} imports {', '.join(private)}")
    assert not found, "tools import private names of the package:\n" + "\n".join(found)


def test_no_file_beside_the_package_edits_the_import_path():
    """Tools and tests import each other as packages (``tools.x``, ``tests.x``), never by editing the path."""
    found = []
    for folder in NOT_SHIPPED.values():
        for path in sorted(folder.rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if (isinstance(node, ast.Attribute) and node.attr == "path" and isinstance(node.value, ast.Name)
                        and node.value.id == "sys"):
                    found.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert not found, "import path edits:\n" + "\n".join(found)
