"""The tests of the tests: the modules under ``tests/`` (read with ``ast``) hold no assertion that cannot fail and no
test that asserts nothing. What is caught:

- an exit code allowed several values (``assert proc.returncode in (0, 1)``): a run has one right exit code;
- a duration or a count asserted non-negative (``assert latency_s >= 0``, ``len(x) >= 0``), a conjunct of the assertion
  on its own: a time the test did not make long (a real sleep, the server's record) is never below zero anyway;
- an expression compared with itself (``a == a``, ``x <= x``; with a call in it, ``f(x) == f(x)`` checks that ``f`` is
  deterministic, and may stay);
- a test that replaces a function (``monkeypatch.setattr(m, "f", ...)``, ``mock.patch("...f")``) and then calls the
  stand-in (``m.f(...)``) or is named after it: it tests its own stub;
- a test function with no ``assert``, no ``pytest.raises``/``warns``/``fail``, no call of a checker that raises on a
  bad value (``check...``, ``validate...``, ``assert_...``) and no call of a helper under tests/ that does any of these.

``conftest.py`` adds the run-time half: a fast test that passes without running any of ``vllm_stress``'s code fails.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers import REPO

# checks the test modules, read with ast
pytestmark = pytest.mark.product_free

TESTS = REPO / "tests"
EXIT_CODE = re.compile(r"(returncode|exit_code|\bcode\b|\brc\b|\.wait\()")
DURATION = re.compile(r"(_s\b|_s['\"]|time|latency|duration|elapsed|seconds|\blag\b)", re.IGNORECASE)
PATCHERS = {"setattr", "patch", "object"}  # monkeypatch.setattr, mock.patch, mock.patch.object
CHECKS = {"raises", "warns", "fail", "deprecated_call"}  # pytest.raises & co: a test may assert with these alone
CHECKERS = ("assert", "check", "validate")  # a call named so raises on a bad value: numpy's, mock's, the suite's
# findings in files other engineers own, left to them: (path, the finding's text); an entry no longer found fails
KNOWN = {("tests/test_realvllm.py", "float(r['tpot_s']) >= 0: a duration is never negative")}
SAME = (ast.Eq, ast.LtE, ast.GtE, ast.Is)  # a == a, a <= a, a >= a, a is a: true whatever a is (a != a: a NaN test)


@dataclass(frozen=True)
class Finding:
    path: str  # relative to the repository
    line: int
    what: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.what}"


def modules_under_tests() -> list[Path]:
    return sorted(TESTS.rglob("*.py"))


def conjuncts(test: ast.expr) -> Iterator[ast.expr]:
    """The parts of an assertion that must each hold: ``a and b`` -> a, b (at any depth of ``and``)."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        for value in test.values:
            yield from conjuncts(value)
    else:
        yield test


def pairs(compare: ast.Compare) -> Iterator[tuple[ast.expr, ast.cmpop, ast.expr]]:
    """``a < b <= c`` -> (a, <, b), (b, <=, c)."""
    operands = [compare.left, *compare.comparators]
    yield from zip(operands, compare.ops, operands[1:], strict=False)


def is_zero(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) in (int, float) and node.value == 0


def never_negative(left: ast.expr, op: ast.cmpop, right: ast.expr) -> ast.expr | None:
    """The ``x`` of ``x >= 0`` or ``0 <= x``, else None."""
    if isinstance(op, ast.GtE) and is_zero(right):
        return left
    if isinstance(op, ast.LtE) and is_zero(left):
        return right
    return None


def has_call(node: ast.expr) -> bool:
    return any(isinstance(part, ast.Call) for part in ast.walk(node))


def is_len(node: ast.expr) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "len"


def exit_code_choice(left: ast.expr, op: ast.cmpop, right: ast.expr) -> bool:
    """``code in (0, 1)``: an exit code allowed more than one value, 0 among them."""
    if not isinstance(op, ast.In) or not isinstance(right, ast.Tuple | ast.List | ast.Set):
        return False
    values = [element.value for element in right.elts if isinstance(element, ast.Constant)]
    return len(values) == len(right.elts) > 1 and 0 in values and bool(EXIT_CODE.search(ast.unparse(left)))


def assertion_findings(tree: ast.AST, path: str) -> Iterator[Finding]:
    """The assertions of a module that cannot fail."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            for left, op, right in pairs(node):
                if isinstance(op, SAME) and ast.dump(left) == ast.dump(right) and not has_call(left):
                    yield Finding(path, node.lineno, f"compares {ast.unparse(left)} with itself")
                if exit_code_choice(left, op, right):
                    yield Finding(path, node.lineno, f"{ast.unparse(node)}: assert the one exit code it must give")
                if (x := never_negative(left, op, right)) is not None and is_len(x):
                    yield Finding(path, node.lineno, f"{ast.unparse(node)}: a length is never negative")
        if isinstance(node, ast.Assert):
            for part in conjuncts(node.test):
                if isinstance(part, ast.Compare) and len(part.ops) == 1:
                    x = never_negative(part.left, part.ops[0], part.comparators[0])
                    if x is not None and not isinstance(x, ast.BinOp) and DURATION.search(ast.unparse(x)):
                        yield Finding(path, node.lineno, f"{ast.unparse(part)}: a duration is never negative")


def patched_names(call: ast.Call) -> tuple[str, str] | None:
    """(the patched object's text, the patched attribute) of ``monkeypatch.setattr(obj, "name", ...)``,
    ``mock.patch.object(obj, "name")`` or ``mock.patch("pkg.mod.name")`` / ``monkeypatch.setattr("pkg.mod.name", ..)``."""
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    if name not in PATCHERS or not call.args:
        return None
    first = call.args[0]
    if isinstance(first, ast.Constant) and isinstance(first.value, str) and "." in first.value:
        owner, _, attribute = first.value.rpartition(".")
        return owner, attribute
    if len(call.args) > 1 and isinstance(call.args[1], ast.Constant) and isinstance(call.args[1].value, str):
        return ast.unparse(first), call.args[1].value
    return None


def stub_findings(test: ast.FunctionDef, path: str) -> Iterator[Finding]:
    """A test that patches a function and then calls the stand-in, or is named after the function it replaced."""
    patched = [found for node in ast.walk(test) if isinstance(node, ast.Call) and (found := patched_names(node))]
    for owner, attribute in patched:
        if len(attribute) > 3 and f"_{attribute}_" in f"_{test.name}_":
            yield Finding(path, test.lineno, f"{test.name} replaces {attribute}, the function it is named after")
        for node in ast.walk(test):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == attribute
                and ast.unparse(node.func.value) == owner
            ):
                yield Finding(path, node.lineno, f"{test.name} calls {owner}.{attribute}, the stand-in it installed")


@functools.cache
def called_names(function: ast.AST) -> frozenset[str]:
    """The names a function calls (``f(...)`` -> f, ``x.f(...)`` -> f), and "assert" if it has an ``assert``."""
    names = set()
    for node in ast.walk(function):
        if isinstance(node, ast.Call):
            func = node.func
            names.add(func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else "")
        elif isinstance(node, ast.Assert):
            names.add("assert")
    return frozenset(names)


def asserts_itself(function: ast.AST) -> bool:
    """An ``assert``, a ``pytest.raises``/``warns``/``fail``, or a checker's call (``assert_...``, ``check...``)."""
    return any(name in CHECKS or name.startswith(CHECKERS) for name in called_names(function))


@functools.cache
def functions(tree: ast.AST) -> list[ast.FunctionDef]:
    return [node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)]


def asserting_helpers(trees: dict[str, ast.AST]) -> set[str]:
    """The names of the functions under tests/ that assert, themselves or through another such function."""
    calls = [(function.name, called_names(function)) for tree in trees.values() for function in functions(tree)]
    asserting = {function.name for tree in trees.values() for function in functions(tree) if asserts_itself(function)}
    while True:
        more = {name for name, called in calls if called & asserting} - asserting
        if not more:
            return asserting
        asserting |= more


def is_test(function: ast.FunctionDef, tree: ast.AST) -> bool:
    """A test pytest collects: ``test_...`` at module level or in a ``Test...`` class."""
    if not function.name.startswith("test_"):
        return False
    body = getattr(tree, "body", [])
    classes = [node for node in body if isinstance(node, ast.ClassDef) and node.name.startswith("Test")]
    return function in body or any(function in cls.body for cls in classes)


def findings(trees: dict[str, ast.AST]) -> list[Finding]:
    """Every finding of the rules above in ``trees`` ({path: module})."""
    helpers = asserting_helpers(trees)
    found: list[Finding] = []
    for path, tree in trees.items():
        found += assertion_findings(tree, path)
        for function in functions(tree):
            if not is_test(function, tree):
                continue
            found += stub_findings(function, path)
            if not asserts_itself(function) and not called_names(function) & helpers:
                found.append(Finding(path, function.lineno, f"{function.name} asserts nothing"))
    return found


def parsed(paths: list[Path]) -> dict[str, ast.AST]:
    return {str(path.relative_to(REPO)): ast.parse(path.read_text(), str(path)) for path in paths}


def test_no_test_asserts_what_cannot_fail():
    found = findings(parsed(modules_under_tests()))
    problems = [str(finding) for finding in found if (finding.path, finding.what) not in KNOWN]
    assert not problems, "tests that cannot fail or check nothing:\n" + "\n".join(problems)
    assert KNOWN <= {(finding.path, finding.what) for finding in found}, "fixed: remove them from KNOWN"


GOOD = """
def helper(x):
    assert x

def test_exact_code(proc):
    assert proc.returncode == 1 and proc.latency_s >= 0.25

def test_through_a_helper(tmp_path):
    helper(tmp_path)

def test_raises():
    with pytest.raises(ValueError):
        int("x")

def test_a_difference_may_be_negative(a, b):
    assert 0 <= a.end_s - b.start_s and a != a and f(a) == f(a)

def test_a_checker_that_raises(options):
    validate(options)

def test_patches_what_it_does_not_test(monkeypatch):
    monkeypatch.setattr(store, "default_db", lambda: "x")
    assert history() == []
"""


@pytest.mark.parametrize(
    ("source", "what"),
    [
        ("def test_x(proc):\n    assert proc.returncode in (0, 1)\n", "assert the one exit code"),
        ("def test_x(run):\n    code = run()\n    assert code in [0, 1, 2], 'x'\n", "assert the one exit code"),
        ("def test_x(r):\n    assert r.ok and r.tool_time >= 0\n", "a duration is never negative"),
        ("def test_x(r):\n    assert 0 <= r['latency_s']\n", "a duration is never negative"),
        ("def test_x(rows):\n    assert len(rows) >= 0\n", "a length is never negative"),
        ("def test_x(a):\n    assert a.total == a.total\n", "with itself"),
        ("def test_x(a, b):\n    assert a <= b <= b\n", "with itself"),
        ("def test_x(rows):\n    rows.sort()\n", "test_x asserts nothing"),
        (
            "def test_x(monkeypatch):\n    monkeypatch.setattr(engine, 'step', lambda: 1)\n    assert engine.step() == 1\n",
            "calls engine.step, the stand-in",
        ),
        (
            "def test_parse_fail_on(monkeypatch):\n    monkeypatch.setattr('a.b.parse_fail_on', f)\n    assert f()\n",
            "replaces parse_fail_on, the function it is named after",
        ),
        (
            "@mock.patch.object(cli, 'main')\ndef test_main(m):\n    assert cli.main() is m.return_value\n",
            "calls cli.main, the stand-in",
        ),
    ],
)
def test_a_test_that_cannot_fail_is_found(source, what):
    found = findings({"tests/test_x.py": ast.parse(GOOD), "tests/test_y.py": ast.parse(source)})
    assert found and {finding.path for finding in found} == {"tests/test_y.py"}, found
    assert any(what in finding.what for finding in found), found
