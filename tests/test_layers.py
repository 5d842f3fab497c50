"""The layer gate: the imports of every module under ``vllm_stress/`` (module-level and inside functions alike, read
with ``ast``) point down the order below, and no two subpackages import each other, directly or round a cycle; nor
do two modules of one subpackage (a type both need lives in a module both import), and the analysis reads as a
pipeline (io.load -> levels -> stats -> summary -> report.document).

Lowest first: ``core`` (nothing of vllm_stress, and none of the libraries of the layers above it); ``client``;
``master``; ``webui``; ``users`` (the Locust side, each on those before it); ``simulator`` and ``analysis`` (on the
core only); ``scenarios`` (on all of those); and the front end, ``vllm_stress/cli.py`` and ``__main__``, on anything.
A subpackage with rooms (sub-packages, ``ROOMS``) is layered the same way inside: a room imports only the rooms
below it, and some rooms none of some libraries (the simulator's model and engine: no aiohttp). ``pytest -s`` prints
the picture of layers and rooms.
Outside the package: nothing but the tests imports ``tests``, and no file imports the repository's entry folders
(``locustfiles``, ``scenarios``, ``analysis``, ``simulator``) as packages: they are run, never imported.
"""

from __future__ import annotations

import ast
import subprocess
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers import REPO

# checks the imports of the repository's files, read with ast
pytestmark = pytest.mark.product_free

PACKAGE = "vllm_stress"
FRONT_END = "cli"  # vllm_stress/cli.py, docsgen.py (the reference pages), __main__.py and __init__.py
BELOW = {  # subpackage -> the subpackages it may import (its own modules aside)
    "core": set(),
    "client": {"core"},
    "master": {"client", "core"},
    "webui": {"master", "client", "core"},
    "users": {"webui", "master", "client", "core"},
    "simulator": {"core"},
    "analysis": {"core"},
    "scenarios": {"users", "webui", "master", "client", "simulator", "analysis", "core"},
}
CORE_FORBIDDEN = {"locust", "gevent", "pandas", "matplotlib", "aiohttp"}  # numpy: its metrics are array math
ENTRY_FOLDERS = {"locustfiles", "scenarios", "analysis", "simulator"}


@dataclass(frozen=True)
class Import:
    path: str  # the importing file, relative to the repository
    line: int
    module: str  # the imported module, absolute (relative imports resolved)

    def __str__(self) -> str:
        return f"{self.path}:{self.line} imports {self.module}"


def python_files() -> list[str]:
    """The repository's Python files, tracked or new (not the ignored ones: .venv, results ...)."""
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "*.py"], cwd=REPO, capture_output=True, text=True, check=True
    )
    return sorted(name for name in listed.stdout.splitlines() if (REPO / name).is_file())


def module_name(path: str) -> str:
    parts = list(Path(path).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: str, known: set[str] = frozenset(), source: str | None = None) -> list[Import]:
    """Every import in the file (``source``: its text, read when not given), at any depth; ``from P import n`` counts
    as ``P.n`` when that is a module in ``known``."""
    name = module_name(path)
    package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
    found = []
    text = (REPO / path).read_text() if source is None else source
    for node in ast.walk(ast.parse(text, path)):
        if isinstance(node, ast.Import):
            found += [Import(path, node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1])
                source = f"{base}.{node.module}" if node.module else base
            else:
                source = node.module
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                found.append(Import(path, node.lineno, submodule if submodule in known else source))
    return list(dict.fromkeys(found))  # ``from P import a, b``: P once


def layer(module: str) -> str:
    """The subpackage of a vllm_stress module, or the front end."""
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1] in BELOW) else FRONT_END


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The groups of subpackages that import each other round a cycle (strongly connected, more than one)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(edges.get(node, ())):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def package_imports() -> list[tuple[str, str, Import]]:
    """(importing layer, imported layer, the import) of every import between two layers of the package."""
    files = [path for path in python_files() if path.startswith(f"{PACKAGE}/")]
    known = {module_name(path) for path in files}
    between = []
    for path in files:
        here = layer(module_name(path))
        for found in imports_of(path, known):
            if found.module == PACKAGE or found.module.startswith(f"{PACKAGE}."):
                there = layer(found.module)
                if there != here:
                    between.append((here, there, found))
    return between


def test_no_import_points_up():
    upward = [
        f"{found} ({here} may import {', '.join(sorted(BELOW[here])) or 'nothing of vllm_stress'})"
        for here, there, found in package_imports()
        if here != FRONT_END and there not in BELOW[here]
    ]
    assert not upward, "imports that point up:\n" + "\n".join(upward)


def test_no_cycle_between_subpackages():
    edges: dict[str, set[str]] = defaultdict(set)
    why: dict[tuple[str, str], list[Import]] = defaultdict(list)
    for here, there, found in package_imports():
        edges[here].add(there)
        why[here, there].append(found)
    problems = []
    for group in cycles(edges):
        problems.append(f"{' <-> '.join(group)} import each other:")
        problems += [f"  {found}" for a in group for b in group for found in why.get((a, b), [])]
    assert not problems, "\n".join(problems)


def module_imports(subpackage: str) -> dict[str, set[str]]:
    """{module: the modules of the same subpackage it imports}, type-checking imports included."""
    files = [path for path in python_files() if path.startswith(f"{PACKAGE}/{subpackage}/")]
    known = {module_name(path) for path in files}
    return {
        module_name(path): {found.module for found in imports_of(path, known) if found.module in known}
        - {module_name(path)}
        for path in files
    }


@pytest.mark.parametrize("subpackage", sorted(BELOW))
def test_no_import_cycle_inside_a_subpackage(subpackage):
    edges = module_imports(subpackage)
    problems = [
        " <-> ".join(name.removeprefix(f"{PACKAGE}.{subpackage}.") for name in group) for group in cycles(edges)
    ]
    assert not problems, f"modules of {subpackage} that import each other round a cycle:\n" + "\n".join(problems)


ROOMS = {  # subpackage -> its rooms (sub-packages), lowest first: a room imports only the rooms before it
    "simulator": ("model", "engine", "api", "pd"),
    "scenarios": ("shapes", "run", "search", "studies"),
}
ROOM_FORBIDDEN = {  # (subpackage, room) -> libraries its modules do not import
    ("simulator", "model"): {"aiohttp"},  # the simulated model and engine run without HTTP (the virtual-time loop)
    ("simulator", "engine"): {"aiohttp"},
}
ROOM_FRONT = "front"  # a subpackage's modules outside its rooms (its command line ...): they may import every room


def room(subpackage: str, module: str) -> str:
    """The room of a module of ``subpackage``, or the subpackage's front."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[2] in ROOMS.get(subpackage, ()) else ROOM_FRONT


def room_imports(subpackage: str) -> dict[str, set[str]]:
    """{room: the other rooms of the subpackage it imports} (the front included)."""
    edges: dict[str, set[str]] = defaultdict(set)
    for module, imported in module_imports(subpackage).items():
        here = room(subpackage, module)
        edges[here] |= {room(subpackage, other) for other in imported} - {here}
    return edges


@pytest.mark.parametrize("subpackage", sorted(ROOMS))
def test_rooms_import_only_the_rooms_below(subpackage):
    order = ROOMS[subpackage]
    upward = [
        f"{module} imports {other}"
        for module, imported in module_imports(subpackage).items()
        if (here := room(subpackage, module)) != ROOM_FRONT
        for other in sorted(imported)
        if (there := room(subpackage, other)) != here
        and (there == ROOM_FRONT or order.index(there) > order.index(here))
    ]
    assert not upward, f"imports that point up between the rooms of {subpackage} ({' < '.join(order)}):\n" + "\n".join(
        upward
    )


@pytest.mark.parametrize(("subpackage", "name"), sorted(ROOM_FORBIDDEN))
def test_a_room_imports_none_of_its_forbidden_libraries(subpackage, name):
    forbidden = ROOM_FORBIDDEN[subpackage, name]
    files = [path for path in python_files() if path.startswith(f"{PACKAGE}/{subpackage}/{name}/")]
    assert files, f"{subpackage}/{name} has no modules"
    found = [str(found) for path in files for found in imports_of(path) if found.module.split(".")[0] in forbidden]
    assert not found, f"{subpackage}/{name} imports none of {', '.join(sorted(forbidden))}:\n" + "\n".join(found)


def import_picture() -> list[tuple[str, list[str], list[str]]]:
    """(name, what it imports, the names before it in its list): one row per layer, lowest first; under a subpackage
    with rooms, one row per room and its front."""
    between: dict[str, set[str]] = defaultdict(set)
    for here, there, _found in package_imports():
        between[here].add(there)
    layers = [*BELOW, FRONT_END]
    rows = []
    for index, name in enumerate(layers):
        rows.append((name, sorted(between[name], key=layers.index), layers[:index]))
        rooms = [*ROOMS.get(name, ()), ROOM_FRONT]
        edges = room_imports(name) if name in ROOMS else {}
        rows += [(f"  {name}/{r}", sorted(edges[r], key=rooms.index), rooms[:i]) for i, r in enumerate(rooms) if edges]
    return rows


def test_the_import_picture_points_down():
    """``pytest -s`` prints it: every layer, and every room of a subpackage, imports only what is above it."""
    rows = import_picture()
    print("\nvllm_stress's layers and rooms, lowest first (a subpackage's front: its modules outside its rooms):")
    print("\n".join(f"{name:<19} -> {', '.join(imported) or 'nothing'}" for name, imported, _ in rows))
    upward = [
        f"{name.strip()} imports {', '.join(sorted(set(imported) - set(above)))}"
        for name, imported, above in rows
        if set(imported) - set(above)
    ]
    assert not upward, "\n".join(upward)


def test_the_analysis_reads_as_a_pipeline():
    edges = module_imports("analysis")
    chain = [f"{PACKAGE}.analysis.{name}" for name in ("io.load", "levels", "stats", "summary", "report.document")]
    for lower, upper in zip(chain, chain[1:], strict=False):
        assert lower in reachable(edges, upper) and upper not in reachable(edges, lower), (lower, upper)


def test_the_pipeline_reaches_capabilities_only_through_their_registry():
    """levels, summary and the report's document loop over vllm_stress.analysis.features.features() and import no
    capability's module, so adding a capability edits none of them."""
    edges = module_imports("analysis")
    registry = f"{PACKAGE}.analysis.features"
    for name in ("levels", "summary", "report.document"):
        module = f"{PACKAGE}.analysis.{name}"
        named = sorted(other for other in edges[module] if other.startswith(f"{registry}."))
        assert registry in edges[module] and not named, f"{module} names capabilities: {named}"


def reachable(edges: dict[str, set[str]], start: str) -> set[str]:
    """The modules ``start`` imports, directly or through others (depth first)."""
    seen: set[str] = set()
    stack = [start]
    while stack:
        for other in edges.get(stack.pop(), ()):
            if other not in seen:
                seen.add(other)
                stack.append(other)
    return seen


def test_the_core_imports_no_library_of_the_layers_above():
    files = [path for path in python_files() if path.startswith(f"{PACKAGE}/core/")]
    heavy = [
        f"{found} (the core runs in every process: no {', '.join(sorted(CORE_FORBIDDEN))})"
        for path in files
        for found in imports_of(path)
        if found.module.split(".")[0] in CORE_FORBIDDEN
    ]
    assert not heavy, "\n".join(heavy)


def test_only_the_tests_import_the_tests():
    outside = [
        str(found)
        for path in python_files()
        if not path.startswith("tests/")
        for found in imports_of(path)
        if found.module.split(".")[0] == "tests"
    ]
    assert not outside, "\n".join(outside)


def test_the_entry_folders_are_not_imported():
    imported = [
        f"{found} (an entry folder: import vllm_stress.{found.module} instead)"
        for path in python_files()
        for found in imports_of(path)
        if found.module.split(".")[0] in ENTRY_FOLDERS
    ]
    assert not imported, "\n".join(imported)


@pytest.mark.parametrize(
    ("source", "module", "expected"),
    [
        ("import vllm_stress.core.schema", "vllm_stress/client/x.py", ["vllm_stress.core.schema"]),
        ("from vllm_stress.core import schema", "vllm_stress/client/x.py", ["vllm_stress.core.schema"]),
        ("from vllm_stress.core.schema import X", "vllm_stress/client/x.py", ["vllm_stress.core.schema"]),
        ("from .engine import Engine", "vllm_stress/simulator/x.py", ["vllm_stress.simulator.engine"]),
        ("from . import engine", "vllm_stress/simulator/__init__.py", ["vllm_stress.simulator.engine"]),
        ("from ..core import schema", "vllm_stress/simulator/x.py", ["vllm_stress.core.schema"]),
        ("def f():\n    import pandas\n", "vllm_stress/core/x.py", ["pandas"]),
        ("from vllm_stress.core.schema import X, Y", "vllm_stress/client/x.py", ["vllm_stress.core.schema"]),
    ],
)
def test_imports_are_read_at_any_depth_and_resolved(source, module, expected):
    known = {"vllm_stress.core.schema", "vllm_stress.simulator.engine"}
    assert [found.module for found in imports_of(module, known, source)] == expected


def test_a_cycle_is_found_and_a_chain_is_not():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "d": {"a"}}) == []
    assert layer("vllm_stress.cli") == layer("vllm_stress") == layer("vllm_stress.__main__") == FRONT_END
    assert layer("vllm_stress.core") == "core" and layer("vllm_stress.webui.bound") == "webui"
