"""What a Locust process and a simulator import before their first request: no library that only one capability uses
(docs/contributing.md, "Imports"). Each Locust worker and each simulator pays for its imports at its start, and the
suite's tests start some 550 of them."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.helpers import REPO

# the libraries of one capability each (--json-schema; --images, --videos; --otlp-port, --otlp-traces-endpoint) and
# the analysis's, which no load-generating process needs
ON_FIRST_USE = {"jsonschema", "PIL", "opentelemetry", "google", "pandas", "matplotlib", "scipy"}
LOCUSTFILES = sorted(str(path.relative_to(REPO)) for path in (REPO / "locustfiles").glob("*.py"))
STARTS = {
    # Locust imports itself before the locustfile (its gevent patches come first); every user class at once
    "locust": "import locust, runpy\n" + "".join(f"runpy.run_path({name!r})\n" for name in LOCUSTFILES),
    "simulator": "import vllm_stress.simulator.cli",
}


def imported_by(code: str) -> set[str]:
    """The top-level packages a fresh interpreter holds after running ``code`` in the repository."""
    report = "import json, sys; print(json.dumps(sorted({name.split('.')[0] for name in sys.modules})))"
    done = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", f"{code}\n{report}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return set(json.loads(done.stdout.splitlines()[-1]))


@pytest.mark.parametrize("process", sorted(STARTS))
def test_a_process_starts_without_the_libraries_of_capabilities_it_was_not_asked_for(process):
    assert imported_by(STARTS[process]) & ON_FIRST_USE == set()


def test_a_capability_asked_for_imports_its_library():
    """The check's own test: --json-schema's reading of a schema file brings jsonschema in, and the check sees it."""
    asked = STARTS["locust"] + "from vllm_stress.client.structured import read_schemas\n"
    assert imported_by(asked + "read_schemas('scenarios/data/schemas')\n") & ON_FIRST_USE == {"jsonschema"}
