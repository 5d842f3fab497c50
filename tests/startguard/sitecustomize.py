"""What a fast test may not start, checked at run time (tests/conftest.py): a server, Locust, vLLM or a browser.

The fast tests run with this folder first on PYTHONPATH and VLLM_STRESS_TEST_STARTS naming a file, so every Python
process started under them (a CLI entry point such as ``vllm-stress whatif`` or ``python -m scenarios run``, and
whatever that starts in turn, through bash or taskset too) imports this module at its start-up. A process that is
itself a starter (Locust, the simulator, vLLM), and every starter command a Python process runs (nginx, Prometheus,
a browser's driver...), is appended to that file, and the test fails with the list. A command is a starter by the
program it runs, not by how the test reached it: an in-process ``main()`` is caught as surely as a subprocess.
"""

import os
import shlex
import subprocess
import sys

STARTS_FILE = "VLLM_STRESS_TEST_STARTS"
PROGRAMS = {"locust", "vllm", "nginx", "prometheus", "chromium", "docker"}  # the program, or an interpreter's script
MODULES = {"locust", "vllm_stress.simulator", "simulator"}  # python -m ...
INTERPRETERS = ("python", "bash", "sh")
DRIVER = "run-driver"  # playwright's driver, which starts the browser


def starter(args) -> str:
    """The command line ``args`` (a Popen argument) if it starts a server, Locust, vLLM or a browser, else ''."""
    one = isinstance(args, (str, bytes, os.PathLike))
    words = shlex.split(os.fsdecode(args)) if one else [os.fsdecode(arg) for arg in args]
    program = words[:1]
    if words and os.path.basename(words[0]).startswith(INTERPRETERS):
        program = [word for word in words[1:] if not word.startswith("-")][:1]
    modules = {module for flag, module in zip(words, words[1:], strict=False) if flag == "-m"}
    if {os.path.basename(word) for word in program} & PROGRAMS or modules & MODULES or DRIVER in words:
        return " ".join(words)
    return ""


def record(args, what: str = "started") -> None:
    """Append ``args`` to the file VLLM_STRESS_TEST_STARTS names (read when called) if it is a starter."""
    path, command = os.environ.get(STARTS_FILE), starter(args)
    if path and command:
        with open(path, "a") as out:
            out.write(f"pid {os.getpid()} {what}: {command[:200]}\n")


def watching(init):
    """``subprocess.Popen.__init__`` that records its command first."""

    def __init__(self, args, *rest, **options):  # noqa: N807 (Popen's own)
        record(args)
        init(self, args, *rest, **options)

    return __init__


if os.environ.get(STARTS_FILE):  # a process started under a fast test
    record(sys.orig_argv, "is")
    subprocess.Popen.__init__ = watching(subprocess.Popen.__init__)
