"""What a fast test may not start, checked at run time (tests/conftest.py): a server, Locust, vLLM or a browser.

The fast tests run with this folder first on PYTHONPATH and VLLM_STRESS_TEST_STARTS naming a file, so every Python
process they start (a CLI entry point such as ``vllm-stress whatif`` or ``python -m scenarios run``, and whatever that
starts in turn) imports this module at its start-up, as the test's own process does: each command one of them starts
that is a starter is appended to that file, and the test fails with the list. A command is a starter by the program
it runs, not by how the test reached it, so an in-process ``main()`` is caught as surely as a subprocess.
"""

import os
import shlex
import subprocess

STARTS_FILE = "VLLM_STRESS_TEST_STARTS"
PROGRAMS = {"locust", "vllm", "nginx", "prometheus", "chromium", "docker", "real-vllm.sh", "fake_docker.py"}
MODULES = {"locust", "vllm_stress.simulator", "simulator"}  # python -m ...
WORDS = {"run-driver"}  # playwright's driver, which starts the browser


def starter(args) -> str:
    """The command line ``args`` (a Popen argument) if it starts a server, Locust, vLLM or a browser, else ''."""
    one = isinstance(args, (str, bytes, os.PathLike))
    words = shlex.split(os.fsdecode(args)) if one else [os.fsdecode(arg) for arg in args]
    names = {os.path.basename(word) for word in words}
    modules = {module for flag, module in zip(words, words[1:], strict=False) if flag == "-m"}
    return " ".join(words) if names & (PROGRAMS | WORDS) or modules & MODULES else ""


def record(args) -> None:
    """Append ``args`` to the file VLLM_STRESS_TEST_STARTS names (read when called) if it is a starter."""
    path, command = os.environ.get(STARTS_FILE), starter(args)
    if path and command:
        with open(path, "a") as out:
            out.write(f"pid {os.getpid()} started: {command[:200]}\n")


def watching(init):
    """``subprocess.Popen.__init__`` that records its command first."""

    def __init__(self, args, *rest, **options):  # noqa: N807 (Popen's own)
        record(args)
        init(self, args, *rest, **options)

    return __init__


if os.environ.get(STARTS_FILE):  # a process a fast test started
    subprocess.Popen.__init__ = watching(subprocess.Popen.__init__)
