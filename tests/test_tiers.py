"""The tiers (tests/conftest.py): a test is marked by the fixtures it uses — those in TIERS start a server, Locust,
vLLM, a browser or network namespaces — and is fast when it uses none. For that to hold, the test modules start none
of those things themselves: their calls are read (ast) and none is found; and a fast test that starts one anyway,
through a CLI entry point or an in-process ``main()``, fails when it runs (tests/startguard/sitecustomize.py)."""

import ast
import subprocess
import sys

import pytest

from tests.helpers import REPO
from tests.startguard import sitecustomize as startguard

# What only a fixture of conftest.py may call: each starts a server, Locust, a browser or namespaces; and the
# programs a subprocess call may not run in a test module (the ones that listen).
STARTERS = {"start_simulator", "FaultServer", "Network", "sync_playwright", "run_scenario"}
SUBPROCESS_RUNS = {"run", "call", "check_call", "check_output", "Popen"}
LISTENING_PROGRAMS = {"locust", "vllm_stress.simulator", "simulator"}


def starts_in(path: str, source: str) -> list[str]:
    """The calls in a test module's ``source`` that start a server, Locust, a browser or namespaces themselves."""
    found = []
    for node in ast.walk(ast.parse(source, path)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        runs = (
            isinstance(func, ast.Attribute)
            and getattr(func.value, "id", "") == "subprocess"
            and name in SUBPROCESS_RUNS
        )
        strings = {n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
        if name in STARTERS or (runs and strings & LISTENING_PROGRAMS):
            found.append(f"{path}:{node.lineno} calls {name}")
    return found


@pytest.mark.product_free
def test_the_test_modules_start_nothing_themselves():
    found = [
        call
        for path in sorted((REPO / "tests").glob("test_*.py"))
        for call in starts_in(str(path.relative_to(REPO)), path.read_text())
    ]
    assert not found, "start these through a fixture of tests/conftest.py (TIERS):\n" + "\n".join(found)


@pytest.mark.product_free
@pytest.mark.parametrize(
    ("source", "found"),
    [
        ("sim = start_simulator('--profile', 'cpu-tiny')", ["t.py:1 calls start_simulator"]),
        ("x = 1\nserver = FaultServer().start()", ["t.py:2 calls FaultServer"]),
        ("subprocess.run([sys.executable, '-m', 'locust', '-f', 'x.py'])", ["t.py:1 calls run"]),
        ("def f():\n    return subprocess.Popen([python, '-m', 'vllm_stress.simulator'])", ["t.py:2 calls Popen"]),
        ("subprocess.Popen(['sleep', '60'])", []),  # a process that never answers: it listens on nothing
        ("runner.run_scenario('smoke', out)", ["t.py:1 calls run_scenario"]),
        ("subprocess.run(['bash', '-n', 'deploy/x.sh'])", []),  # neither a server nor Locust
        ("simulator('--profile', 'cpu-tiny')", []),  # the fixture
    ],
)
def test_each_way_of_starting_is_found(source, found):
    assert starts_in("t.py", source) == found


def test_a_test_that_uses_none_of_those_fixtures_is_fast(request):
    assert [marker.name for marker in request.node.iter_markers()] == ["fast"]


@pytest.fixture
def through_another(fault_servers):
    """A fixture of a test module built on one of TIERS (the fault servers: none is started until asked)."""
    return fault_servers


def test_a_fixture_built_on_one_marks_its_tests_too(through_another, request):
    assert [marker.name for marker in request.node.iter_markers()] == ["server"]


@pytest.mark.product_free
def test_every_marker_is_registered(request):
    from tests.conftest import TIERS

    registered = {line.split(":", 1)[0] for line in request.config.getini("markers")}
    assert {marker for markers in TIERS.values() for marker in markers} | {"fast"} <= registered


@pytest.mark.product_free
@pytest.mark.parametrize(
    ("args", "starts"),
    [
        ([sys.executable, "-m", "locust", "-f", "x.py"], True),
        ([sys.executable, "-m", "vllm_stress.simulator", "--port", "0"], True),
        ("/usr/sbin/nginx -c /tmp/nginx.conf", True),
        (["/venv/bin/python", "/venv/bin/locust", "--worker"], True),  # a console script, as it sees itself
        (["bash", "-c", "exec vllm serve"], False),  # vLLM is caught at its own start-up
        ([sys.executable, "-c", "from locust.runners import CPU_WARNING_THRESHOLD"], False),
        (["bash", "-n", "deploy/vllm-serve.sh"], False),
        ([sys.executable, "-m", "vllm_stress", "--help"], False),
        (["git", "ls-files"], False),
    ],
)
def test_a_command_is_a_starter_by_the_program_it_runs(args, starts):
    assert bool(startguard.starter(args)) is starts


def test_a_fast_test_that_starts_one_through_a_cli_entry_point_is_caught(tmp_path, monkeypatch):
    """The guard of tests/conftest.py, on its own file: a Python process the test starts (here a stand-in for a CLI
    entry point) starts Locust in turn through bash, and the test's own process starts it too (an in-process
    ``main()``); each is recorded. ``locust --version`` only prints: a start is told by its command, not by what
    it does."""
    starts = tmp_path / "starts.log"
    monkeypatch.setenv(startguard.STARTS_FILE, str(starts))
    locust = [sys.executable, "-m", "locust", "--version"]
    through_bash = ["bash", "-c", " ".join(locust)]
    entry_point = f"import subprocess; subprocess.run({through_bash!r}, capture_output=True, check=True)"
    subprocess.run([sys.executable, "-c", entry_point], check=True, timeout=120)
    assert [line.split(":", 1)[0].split()[2] for line in starts.read_text().splitlines()] == ["is"]  # Locust itself
    subprocess.run(locust, capture_output=True, check=True, timeout=120)
    recorded = starts.read_text().splitlines()
    assert [line.split(":", 1)[0].split()[2] for line in recorded] == ["is", "started", "is"], recorded
    assert all(line.endswith("-m locust --version") for line in recorded), recorded
