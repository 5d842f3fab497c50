"""The fixtures that start servers, Locust, vLLM, a browser or network namespaces, and the tiers they make.

Every such fixture is named in ``TIERS`` with the markers it gives the tests that use it, directly or through
another fixture; a test that uses none of them is marked ``fast`` (``make test-fast`` runs ``pytest -m fast``).
So a test that starts one of these things gets it from a fixture here, never by starting it in its body: a fast test
that starts one anyway, directly or through a CLI entry point, fails (tests/startguard/sitecustomize.py).
Processes run on 127.0.0.1 (or in network namespaces of their own) and are stopped after their test or module.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib
import json
import math
import os
import shutil
import signal
import ssl
import subprocess
import sys
import sysconfig
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from xdist.scheduler import LoadFileScheduling

from tests.faultserver import FaultServer
from tests.helpers import REPO, Server
from tests.netns import Network, netns_unavailable
from tests.shapes import METRICS_FLAGS
from tests.startguard import sitecustomize as startguard
from vllm_stress.analysis.figures import FIGURES_ENV
from vllm_stress.scenarios.run.runner import free_port
from vllm_stress.simulator.process import start_simulator

TIERS = {
    "simulator": ("server",),
    "module_simulator": ("server",),
    "fault_servers": ("server",),
    "scaler": ("server",),  # simulator replicas behind nginx, scaled by tests/scaler.py
    "docker": ("server",),  # its containers are simulators
    "run_locust": ("locust",),
    "processes": ("locust",),  # Locust and the scenario runner, in the background
    "scenarios": ("locust", "server"),  # a scenario run starts the simulator (without --target) and Locust
    "installed_suite": ("locust", "server"),  # its commands run the simulator and Locust
    "real_vllm": ("realvllm",),
    "real_vllm_traffic": ("realvllm",),
    "real_vllm_pooling": ("realvllm",),
    "browser": ("browser",),
    "network": ("netns",),
}
# the seconds each test file took in a whole run (`python -m benchmarks.test_times JUNIT... --write` writes it): the
# order the test processes take the files in
FILE_SECONDS = json.loads((REPO / "tests" / "file_seconds.json").read_text())
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")  # the Makefile's
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]
REAL_VLLM_SCRIPT = REPO / "deploy" / "real-vllm.sh"
CI = os.environ.get("CI") == "true"  # CI=true: a test that would skip fails instead
# the reports the tests write, in this process and in those it starts, leave their PNG figures out (a second of
# matplotlib each, about a tenth of a load test's CPU); a test that looks at them asks for the `figures` fixture
os.environ[FIGURES_ENV] = "0"


def import_locust_unpatched() -> None:
    """Locust here, without its import-time gevent monkey-patching: the units that import Locust (the load shape,
    the level window, the suite's events) are tested in this process, which has imported ssl already (patching after
    that breaks ssl) and runs threads and asyncio loops. The Locust processes the tests start patch themselves."""
    os.environ["LOCUST_SKIP_MONKEY_PATCH"] = "1"
    try:
        importlib.import_module("locust")
    finally:
        del os.environ["LOCUST_SKIP_MONKEY_PATCH"]


import_locust_unpatched()


# the real-vLLM files, each with its own real vLLM, at the head of the suite: the first on one test process, the
# other two on another, one after the other; each start waits for vLLM's install (`make test` runs it in the
# background; deploy/real-vllm.sh holds the starts on its lock, and installs when it is missing), and one server
# starts at a time (serve_real_vllm)
REAL_VLLM_FILES = ("tests/test_realvllm.py", "tests/test_realvllm_pooling.py", "tests/test_realvllm_traffic.py")
REAL_VLLM_PAIRED = REAL_VLLM_FILES[1:]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test's tiers by the fixtures it uses, and put the longest files first: the test processes take a
    file at a time (pytest-xdist's ``--dist loadfile``), so the files that start last decide when the suite ends.
    The real-vLLM files come first (REAL_VLLM_FILES), then a file not timed yet, then the rest by the seconds they
    took (FILE_SECONDS)."""
    for item in items:
        markers = {marker for name in item.fixturenames for marker in TIERS.get(name, ())}
        for marker in sorted(markers) or ["fast"]:
            item.add_marker(marker)
        if "realvllm" in markers and file_of(item.nodeid) not in REAL_VLLM_FILES:
            raise pytest.UsageError(f"{item.nodeid} needs a real vLLM: its file belongs in REAL_VLLM_FILES")

    def order(item: pytest.Item) -> tuple[int, float]:
        file = file_of(item.nodeid)
        first = REAL_VLLM_FILES.index(file) if file in REAL_VLLM_FILES else len(REAL_VLLM_FILES)
        return first, -FILE_SECONDS.get(file, math.inf)

    items.sort(key=order)  # stable: a file's tests stay in order


def file_of(nodeid: str) -> str:
    return nodeid.split("::")[0]


class PairedRealVllmFiles(LoadFileScheduling):
    """``--dist loadfile``, except that REAL_VLLM_PAIRED are one unit of work: one test process runs them one after
    the other, beside the first real-vLLM file's process."""

    def _split_scope(self, nodeid: str) -> str:
        scope = super()._split_scope(nodeid)
        return "real-vllm-paired" if scope in REAL_VLLM_PAIRED else scope


def pytest_xdist_make_scheduler(config: pytest.Config, log) -> LoadFileScheduling | None:
    return PairedRealVllmFiles(config, log) if config.getvalue("dist") == "loadfile" else None


def skip_reason(report: pytest.TestReport) -> str:
    """Why a test was skipped, as its skip said (which names the make target that installs what it lacks)."""
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    return reason.removeprefix("Skipped: ")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """With CI=true nothing skips: a test that lacks a program or a privilege fails, saying which."""
    outcome = yield
    report = outcome.get_result()
    if CI and report.skipped and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = f"CI=true runs every test, and this one cannot run here: {skip_reason(report)}"


def pytest_terminal_summary(terminalreporter) -> None:
    """The run's last lines: one per reason tests were skipped for, with how many."""
    reasons = Counter(skip_reason(report) for report in terminalreporter.stats.get("skipped", []))
    if reasons:
        terminalreporter.section("skipped, and why")
    for reason, count in reasons.most_common():
        terminalreporter.write_line(f"{count} skipped: {reason}")


@pytest.fixture(autouse=True)
def fast_tests_start_nothing(request, tmp_path_factory, monkeypatch):
    """A fast test fails if it, or any Python process it starts, starts a server, Locust, vLLM or a browser (in
    this process as in its children, through tests/startguard/sitecustomize.py)."""
    if request.node.get_closest_marker("fast") is None:
        yield
        return
    starts = tmp_path_factory.mktemp("starts") / "starts.log"
    starts.touch()
    guard = Path(startguard.__file__).parent
    monkeypatch.setenv(startguard.STARTS_FILE, str(starts))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(guard), os.environ.get("PYTHONPATH")])))
    monkeypatch.setattr(subprocess.Popen, "__init__", startguard.watching(subprocess.Popen.__init__))
    yield
    if started := starts.read_text():
        pytest.fail(f"a fast test started these: use a fixture of tests/conftest.py (TIERS)\n{started}")


@contextlib.contextmanager
def stopped_after(start):
    """``start`` for the block: everything it started is stopped (``.stop()``) when the block ends."""
    started = []

    def start_one(*args, **kwargs):
        started.append(start(*args, **kwargs))
        return started[-1]

    try:
        yield start_one
    finally:
        for thing in started:
            thing.stop()


@pytest.fixture
def simulator():
    """Start simulators (``simulator("--profile", "cpu-tiny")``: a SimulatorProcess, also a context manager);
    all are stopped after the test."""
    with stopped_after(start_simulator) as start:
        yield start


@pytest.fixture(scope="module")
def module_simulator():
    """As ``simulator``, stopped after the module: one server for the module's tests."""
    with stopped_after(start_simulator) as start:
        yield start


@pytest.fixture
def scaler(tmp_path):
    """``scaler(slots, simulator_args, **rule)``: simulator replicas behind nginx that tests/scaler.py (a test fixture,
    not a product) scales by their queue depth, one serving at first; stopped after the test. Skips without nginx."""
    from tests.scaler import Scaler
    from tests.test_fleet import NGINX

    if not os.path.exists(NGINX):
        pytest.skip(f"{NGINX} is missing: make nginx")
    started = []

    def start(slots: int, simulator_args: list[str], **rule) -> Scaler:
        started.append(Scaler(tmp_path, slots, simulator_args, **rule).start())
        return started[-1]

    yield start
    for made in started:
        made.stop()


@pytest.fixture(scope="module")
def fault_servers():
    """Start fault servers (tests/faultserver.py, ``fault_servers(ssl_context=None)``) in this process; all are
    stopped after the module."""
    with stopped_after(lambda **options: FaultServer(**options).start()) as start:
        yield start


@pytest.fixture(scope="module")
def fault_server(fault_servers):
    """One plain fault server for the module's tests."""
    return fault_servers()


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key (cert.pem, key.pem), made by openssl for the module."""
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


@pytest.fixture(scope="module")
def tls_server(fault_servers, tls_files):
    """A fault server over TLS with the module's self-signed certificate; returns (server, cert path)."""
    cert, key = tls_files
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    return fault_servers(ssl_context=context), cert


@pytest.fixture(scope="session")
def run_locust():
    """``run_locust(*args, timeout=120, env=None)``: the locust CLI run from the repository root to its end; returns
    the finished process (output captured). A run past its timeout is killed."""

    def run(*args: str, timeout: float = 120, env: dict | None = None) -> subprocess.CompletedProcess:
        cmd = [sys.executable, "-m", "locust", *args]
        environment = os.environ | {"PYTHONUNBUFFERED": "1"} | (env or {})
        return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout, env=environment)

    return run


def hear_ctrl_c() -> None:
    """In the child: SIGINT back to its default. A test runner started in the background by a non-interactive shell
    ignores SIGINT and its children inherit that, so Locust would never see the Ctrl-C a test sends."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.fixture
def processes():
    """``processes(command, log, env=None, cwd=REPO)``: start a command in the background with its output in the file
    ``log``; whatever still runs after the test is killed."""
    started: list[subprocess.Popen] = []

    def start(command: list, log: Path, env: dict | None = None, cwd: Path = REPO) -> subprocess.Popen:
        with open(log, "w") as out:
            proc = subprocess.Popen(
                [str(part) for part in command],
                cwd=cwd,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=os.environ | {"PYTHONUNBUFFERED": "1"} | (env or {}),
                preexec_fn=hear_ctrl_c,
            )
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="session")
def scenarios():
    """The scenarios command (``python -m scenarios``) in this process: ``scenarios(argv)`` returns its exit code.
    A run starts the simulator (without --target), a Locust master and its workers."""
    from vllm_stress.scenarios.cli import main

    return main


@pytest.fixture
def docker(tmp_path, monkeypatch):
    """A fake ``docker`` first on PATH (tests/fake_docker.py: its containers are simulators); returns a function that
    reads its recorded calls. A container a failed test left running is stopped."""
    state = tmp_path / "docker"
    state.mkdir()
    (state / "docker").write_text(f'#!/bin/sh\nexec {sys.executable} {REPO / "tests" / "fake_docker.py"} "$@"\n')
    (state / "docker").chmod(0o755)
    monkeypatch.setenv("PATH", f"{state}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_DOCKER_DIR", str(state))
    monkeypatch.setenv("HOME", str(tmp_path))  # the cache mounts of vllm-serve.sh point here
    yield (
        lambda: (
            [json.loads(line) for line in (state / "calls.jsonl").read_text().splitlines()]
            if (state / "calls.jsonl").exists()
            else []
        )
    )
    for pid_file in state.glob("*.pid"):
        subprocess.run([str(state / "docker"), "stop", pid_file.stem], capture_output=True, timeout=60)


@dataclass
class InstalledSuite:
    """The suite installed in a virtualenv of its own: ``bin`` holds its commands, ``env`` the environment to run
    them in (no PYTHONPATH or VIRTUAL_ENV of the test run)."""

    bin: Path
    env: dict

    def run(self, *command: str, cwd: Path, timeout: float) -> subprocess.CompletedProcess:
        """One of the venv's commands (``vllm-stress``; ``python``, as ``python -m locust`` too) run in ``cwd`` to its end."""
        return subprocess.run(
            [str(self.bin / command[0]), *command[1:]],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=self.env,
        )


@pytest.fixture(scope="module")
def installed_suite(tmp_path_factory):
    """A regular (not editable) ``pip install`` of a copy of the tracked files into a fresh virtualenv: what a worker
    machine or a CI job gets without the repository. The copy keeps symlinks as symlinks (``git ls-files`` lists a
    symlinked folder as one entry: the package's links to the data).

    The third-party packages come from this test run's virtualenv, seen through a ``.pth`` file (the pinned
    requirements.txt made both), and ``pip check`` proves they meet the package's declared dependencies: a fresh
    resolve and unpack of them took 90 s of the suite's time to re-prove what ``make venv`` does. The suite itself
    is not seen there: its editable install is a ``.pth`` file too, and a folder a ``.pth`` file adds is not scanned
    for more."""
    folder = tmp_path_factory.mktemp("install")
    source = folder / "source"  # a copy: the build leaves nothing in the repository
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, text=True, check=True)
    for name in filter(None, tracked.stdout.split("\0")):
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, source / name, follow_symlinks=False)
    venv = folder / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    own_packages = sysconfig.get_paths(vars={"base": str(venv), "platbase": str(venv)})["purelib"]
    Path(own_packages, "third-party.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    for command in (["install", "-q", "--no-deps", str(source)], ["check"]):
        pip = subprocess.run(
            [venv / "bin" / "python", "-m", "pip", *command], capture_output=True, text=True, timeout=300
        )
        assert pip.returncode == 0, pip.stdout[-3000:] + pip.stderr[-3000:]
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return InstalledSuite(venv / "bin", env | {"PYTHONUNBUFFERED": "1"})


# the traffic tier's server: LoRA adapters (loaded at runtime by /v1/load_lora_adapter), priority scheduling and
# tool calls parsed from Qwen2's output (the tiny model's template is Qwen2's: the hermes parser)
TRAFFIC_FLAGS = ("--enable-lora", "--max-loras", "2", "--max-lora-rank", "8", "--max-cpu-loras", "4")
TRAFFIC_FLAGS += ("--scheduling-policy", "priority")
TRAFFIC_FLAGS += ("--enable-log-requests",)  # a line per request naming its LoRA adapter: the server's count per model
# a required or named tool_choice needs a tool parser (vllm/renderers/online_renderer.py)
TRAFFIC_FLAGS += ("--enable-auto-tool-choice", "--tool-call-parser", "hermes")


def serve_real_vllm(tmp_path_factory, *flags: str, env: dict[str, str] | None = None, spans: bool = True):
    """A real vLLM (CPU build, deploy/real-vllm.sh) started with ``flags``, stopped when the generator closes. It has
    its own state file, so a server the user started is left alone. The server is pinned to its cores and this
    process, with the Locust processes it starts, to the others. With ``spans`` it exports its request spans to the
    Server's otlp_port, where a test's --otlp-port takes them (without a receiver, vLLM's exporter retries each batch
    and holds the server's stop for 30 s)."""
    state = tmp_path_factory.mktemp("real-vllm") / "server.env"
    otlp_port = free_port() if spans else 0
    env = os.environ | (env or {}) | {"REAL_VLLM_STATE": str(state)}
    if spans:
        env |= {"REAL_VLLM_OTLP_ENDPOINT": f"http://127.0.0.1:{otlp_port}/v1/traces"}
    command = ["bash", REAL_VLLM_SCRIPT, "start", *flags]
    # one start at a time: three real vLLMs started together each took over three minutes on the one core they are
    # pinned to, past the start's bound; an idle server costs next to nothing once it is up
    with (tmp_path_factory.getbasetemp().parent / "real-vllm-start.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        started = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
    own_cpus = os.sched_getaffinity(0)
    try:
        assert started.returncode == 0, started.stderr[-3000:]
        values = dict(line.split("=", 1) for line in state.read_text().splitlines())
        if values.get("CLIENT_CPUS"):  # the Locust processes started from here inherit it
            subprocess.run(["taskset", "-pc", values["CLIENT_CPUS"], str(os.getpid())], check=True, capture_output=True)
        yield Server(values["URL"], values["MODEL"], otlp_port, values["LOG"])
    finally:
        os.sched_setaffinity(0, own_cpus)
        subprocess.run(["bash", REAL_VLLM_SCRIPT, "stop"], env=env, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def real_vllm(tmp_path_factory):
    """One real vLLM for the module, stopped when the module ends rather than idling through the rest of the suite;
    in vLLM's development mode, which serves /reset_prefix_cache (--reset-prefix-cache), with its KV block metrics on
    for every block (their names and labels are the simulator's: tests/fixtures/vllm_shapes.json)."""
    yield from serve_real_vllm(tmp_path_factory, *METRICS_FLAGS, env={"VLLM_SERVER_DEV_MODE": "1"})


@pytest.fixture(scope="module")
def real_vllm_pooling(tmp_path_factory):
    """One real vLLM for the module serving the tiny model as an embedding model (vLLM's pooling runner, the model
    converted to embed): /v1/embeddings, /rerank and /score (tests/test_realvllm_pooling.py)."""
    yield from serve_real_vllm(tmp_path_factory, "--runner", "pooling", "--convert", "embed", spans=False)


@pytest.fixture(scope="module")
def vllm_profile_dir(tmp_path_factory) -> Path:
    """Where the traffic tier's real vLLM writes its torch profiles (its --profiler-config)."""
    return tmp_path_factory.mktemp("vllm-profiles")


@pytest.fixture(scope="module")
def real_vllm_traffic(tmp_path_factory, vllm_profile_dir):
    """One real vLLM for the module with LoRA adapters, priority scheduling, tool choice and its torch profiler on
    (TRAFFIC_FLAGS; the profiler only answers /start_profile): the traffic tests (tests/test_realvllm_traffic.py)
    share it, so the suite starts one such server, not one per feature."""
    # without Python stacks and gzip: the CPU build writes a second's trace in seconds, not a minute
    profiler = {"profiler": "torch", "torch_profiler_dir": str(vllm_profile_dir), "torch_profiler_with_stack": False}
    profiler["torch_profiler_use_gzip"] = False
    flags = (*TRAFFIC_FLAGS, "--profiler-config", json.dumps(profiler))
    yield from serve_real_vllm(tmp_path_factory, *flags, env={"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"}, spans=False)


@pytest.fixture
def figures(monkeypatch):
    """The reports this test writes draw their figures, as they do outside the tests (FIGURES_ENV above)."""
    monkeypatch.setenv(FIGURES_ENV, "1")


@pytest.fixture
def browser():
    """A headless Chromium (Debian's, driven by playwright), closed after the test; skips without either."""
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"{CHROMIUM} is missing: make browser")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed: make venv")
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def network():
    """A bridge in its own network namespace for hosts (``network.add_host(name)``); skips without namespaces.
    Every process started in the hosts is stopped and every namespace deleted after the test, pass or fail."""
    if reason := netns_unavailable():
        pytest.skip(f"{reason}: run the tests as root on Linux")
    net = Network()
    try:
        yield net
    finally:
        net.close()


PRODUCT = str(Path(importlib.import_module("vllm_stress").__file__).parent) + os.sep
PRODUCT_FREE = "product_free"  # the marker of a fast test that checks files or text, not vllm_stress's code
PRODUCT_FREE_TESTS = {  # as if marked (one checks that "fast" is its only marker)
    "tests/test_hosts.py::test_without_root_the_host_tests_skip_with_the_reason",
    "tests/test_tiers.py::test_a_test_that_uses_none_of_those_fixtures_is_fast",
}


class ProductWatch:
    """Fails a fast test that passes while none of ``vllm_stress``'s code ran in its setup, its call or the setup of
    a fixture it uses (a module's fixture may run the product once for its tests), in any thread, and it started no
    process (which may run it): a stub or a fixture made it pass without the code under test. A test that checks
    the repository's files or data rather than the product's code says so: ``pytest.mark.product_free``.

    A profile function (``sys.setprofile``) watches the calls until the first one into ``vllm_stress/`` or
    ``subprocess``'s start of a child, and then stops watching: a test that runs the product pays little for it."""

    def __init__(self) -> None:
        self.ran = pytest.StashKey[bool]()
        self.fixtures_ran: set[tuple[str, str]] = set()  # (name, baseid) of fixtures whose setup ran the product
        self.waiting: list[Callable[[], None]] = []  # what to tell when the product runs

    def pytest_configure(self, config: pytest.Config) -> None:
        config.addinivalue_line("markers", f"{PRODUCT_FREE}: a fast test that runs none of vllm_stress's code")

    def watched(self, item: pytest.Item) -> bool:
        free = item.get_closest_marker(PRODUCT_FREE) is not None or item.nodeid in PRODUCT_FREE_TESTS
        return item.get_closest_marker("fast") is not None and not free

    def profile(self, frame, event, arg) -> None:
        code = frame.f_code
        if event == "call" and (
            code.co_filename.startswith(PRODUCT)
            or (code.co_name == "_execute_child" and code.co_filename == subprocess.__file__)
        ):
            for tell in self.waiting:
                tell()
            self.waiting.clear()
            self.stop()

    def stop(self) -> None:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]  # None clears it

    def watching(self, tell: Callable[[], None] | None):
        """Watch over the hook's run (a generator for a hookwrapper); ``tell()`` once the product runs."""
        if tell is None:
            yield
            return
        self.waiting.append(tell)
        threading.setprofile(self.profile)
        sys.setprofile(self.profile)
        try:
            yield
        finally:
            if tell in self.waiting:
                self.waiting.remove(tell)
            if not self.waiting:
                self.stop()

    def mark_ran(self, item: pytest.Item) -> Callable[[], None] | None:
        """What tells ``item`` the product ran, None for a test not watched."""
        return (lambda: item.stash.__setitem__(self.ran, True)) if self.watched(item) else None

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_setup(self, item: pytest.Item):
        yield from self.watching(self.mark_ran(item))

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item: pytest.Item):
        yield from self.watching(self.mark_ran(item))

    @pytest.hookimpl(hookwrapper=True)
    def pytest_fixture_setup(self, fixturedef: pytest.FixtureDef, request: pytest.FixtureRequest):
        key = (fixturedef.argname, fixturedef.baseid)
        # a function's fixture is set up in its test's setup, which its test's own watch sees
        yield from self.watching(None if fixturedef.scope == "function" else lambda: self.fixtures_ran.add(key))

    def ran_product(self, item: pytest.Item) -> bool:
        return item.stash.get(self.ran, False) or any(
            name in item.fixturenames and item.nodeid.startswith(baseid) for name, baseid in self.fixtures_ran
        )

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        outcome = yield
        report = outcome.get_result()
        if report.when == "call" and report.passed and self.watched(item) and not self.ran_product(item):
            report.outcome = "failed"
            report.longrepr = (
                "passed without running any of vllm_stress's code (or starting a process): a stub or a fixture "
                f"stands in for the code under test; a test of the repository's files is marked {PRODUCT_FREE}"
            )


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(ProductWatch(), "product-watch")
