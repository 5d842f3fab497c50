"""Every library a file imports is pinned in a requirements file: the package's and the benchmarks' in
requirements.txt, the tests' in either. A library that only comes with another (Pillow with matplotlib, numpy with
pandas) would change or vanish with that one's next release. deploy/ is left out: its scripts run in vLLM's own
environment."""

from __future__ import annotations

import re
import sys
from importlib.metadata import packages_distributions

from tests.helpers import REPO
from tests.test_layers import imports_of, python_files

DEV_TOOLS = ("vllm_stress/docsgen.py",)  # its MkDocs hook runs only in the docs build, a requirements-dev.txt tool
OWN = {"vllm_stress", "tests", "benchmarks", "locustfiles", "scenarios", "analysis", "simulator", "conftest"}


def pinned(name: str) -> set[str]:
    """The distributions pinned in a requirements file, normalised as importlib.metadata names them."""
    lines = (line.split("#")[0].strip() for line in (REPO / name).read_text().splitlines())
    return {normal(re.split("[=<>~!; ]", line)[0]) for line in lines if line}


def normal(distribution: str) -> str:
    return re.sub(r"[-_.]+", "-", distribution).lower()


def undeclared(folders: tuple[str, ...], declared: set[str], skip: tuple[str, ...] = ()) -> list[str]:
    """Each import of a file under ``folders`` (but ``skip``) whose library is not in ``declared``."""
    by_module = packages_distributions()
    found = []
    for path in python_files():
        if not path.startswith(folders) or path in skip:
            continue
        for imported in imports_of(path):
            top = imported.module.split(".")[0]
            if top in sys.stdlib_module_names or top in OWN:
                continue
            distributions = {normal(name) for name in by_module.get(top, [top])}
            if not distributions & declared:
                found.append(f"{imported} ({', '.join(sorted(distributions))})")
    return found


def test_the_package_declares_what_it_imports():
    missing = undeclared(("vllm_stress/", "benchmarks/", "locustfiles/"), pinned("requirements.txt"), DEV_TOOLS)
    assert not missing, "imported but not in requirements.txt:\n" + "\n".join(missing)


def test_the_tests_declare_what_they_import():
    declared = pinned("requirements.txt") | pinned("requirements-dev.txt")
    missing = undeclared(("tests/", *DEV_TOOLS), declared)
    assert not missing, "imported but in no requirements file:\n" + "\n".join(missing)
