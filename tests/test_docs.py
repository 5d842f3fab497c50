"""The documentation (docs/contributing.md): the MkDocs site builds in strict mode — every link between pages
resolves — and the generated reference pages (``vllm_stress.docsgen``) are what the code generates now: an option
whose help changes without its page fails the check, and the build."""

import re
import subprocess
import sys

import pytest

from tests.helpers import REPO
from vllm_stress import docsgen
from vllm_stress.core import schema
from vllm_stress.scenarios import cli as scenarios_cli

EDITED_HELP = "Locust worker processes, said another way"


def build(config, site):
    """``mkdocs build --strict`` of ``config`` into ``site``: the finished process."""
    command = [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(config), "--site-dir", site]
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120)


def test_the_site_builds_in_strict_mode(tmp_path):
    built = build(REPO / "mkdocs.yml", tmp_path / "site")
    assert built.returncode == 0, built.stderr
    for page in ("getting-started", "guides/cuda-rocm", "concepts/steady-state", "reference/commands"):
        assert (tmp_path / "site" / page / "index.html").is_file()


def test_the_committed_reference_is_what_the_code_generates():
    assert docsgen.stale() == []


def test_an_options_help_edited_without_its_page_fails_the_check(monkeypatch):
    add_run_arguments = scenarios_cli.add_run_arguments

    def edited(run):
        add_run_arguments(run)
        next(action for action in run._actions if "--workers" in action.option_strings).help = EDITED_HELP

    monkeypatch.setattr(scenarios_cli, "add_run_arguments", edited)
    assert docsgen.stale() == ["commands.md"]
    assert EDITED_HELP in docsgen.commands_page()
    assert docsgen.main(["--check"]) == 1


def test_a_reference_page_that_drifted_fails_the_build(tmp_path):
    """A copy of the docs whose commands page no longer matches the parsers (as after an edited help): the build's
    hook refuses it, strict or not."""
    docs = tmp_path / "docs"
    subprocess.run(["cp", "-r", str(REPO / "docs"), str(docs)], check=True)
    page = docs / "reference" / "commands.md"
    page.write_text(
        page.read_text().replace(
            "Locust worker processes (default", "Locust worker processes, said another way (default"
        )
    )
    config = tmp_path / "mkdocs.yml"
    config.write_text(
        (REPO / "mkdocs.yml").read_text().replace("vllm_stress/docsgen.py", str(REPO / "vllm_stress" / "docsgen.py"))
    )
    built = build(config, tmp_path / "site")
    assert built.returncode != 0
    assert "reference pages out of date with the code: commands.md" in built.stderr


@pytest.mark.product_free
def test_the_run_folder_page_names_every_column():
    page = (REPO / "docs" / "reference" / "run-folder.md").read_text()
    columns = [
        *schema.REQUEST_COLUMNS,
        *schema.LEVEL_COLUMNS,
        *schema.ITL_COLUMNS,
        *schema.RUN_KEYS,
        *schema.SERVER_METRICS_COLUMNS,
        *schema.GPU_METRICS_COLUMNS,
        *schema.CLIENT_HEALTH_COLUMNS,
    ]
    assert [column for column in columns if f"`{column}`" not in page] == []


@pytest.mark.product_free
def test_the_readmes_links_into_the_docs_resolve():
    """README.md is outside the site (MkDocs does not check it): each of its relative links names a file."""
    text = (REPO / "README.md").read_text()
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text)
    assert links and [link for link in links if "://" not in link and not (REPO / link).exists()] == []
