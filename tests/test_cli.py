"""vllm_stress.cli: the ``vllm-stress`` command, the front end — each subcommand reaches its tool, and
``vllm-stress locustfile`` names the files for ``locust -f`` (the installed command: test_install.py)."""

from pathlib import Path

import pytest

from tests.helpers import REPO
from vllm_stress import cli
from vllm_stress.scenarios import cli as scenarios_cli
from vllm_stress.scenarios.config import scenario_names
from vllm_stress.scenarios.runner import SHAPE
from vllm_stress.users import LOCUSTFILES

PACKAGE = Path(cli.__file__).parent


def test_help_and_a_bad_command(capsys):
    assert cli.main(["--help"]) == 0
    assert "vllm-stress run --scenario demo" in capsys.readouterr().out
    assert cli.main([]) == 2 and cli.main(["bogus"]) == 2
    assert capsys.readouterr().err.count("vllm-stress locustfile [NAME]") == 2


def test_locustfiles_are_the_packages_files(capsys):
    assert cli.main(["locustfile"]) == 0 and cli.main(["locustfile", "session"]) == 0
    assert cli.main(["locustfile", "shape"]) == 0
    printed = [Path(line) for line in capsys.readouterr().out.splitlines()]
    assert printed == [PACKAGE / "users" / "chat.py", PACKAGE / "users" / "session.py", SHAPE]
    assert all(path.is_file() for path in printed) and SHAPE == PACKAGE / "scenarios" / "shape.py"
    with pytest.raises(SystemExit) as refused:
        cli.locustfile("nope")
    assert (
        str(refused.value) == "error: no locustfile 'nope' (one of: chat, completions, generate, sdk, session) or shape"
    )


def test_each_command_reaches_its_tool(tmp_path, capsys):
    assert cli.main(["list"]) == 0
    listed = [line.split(": ", 1)[0] for line in capsys.readouterr().out.splitlines()]
    assert listed == scenario_names() and "smoke" in listed
    assert cli.main(["plan", "--users", "1000", "--tokens-per-s-per-stream", "20", "--cores-per-machine", "2"]) == 0
    assert "worker processes: 1 " in capsys.readouterr().out
    for command in ("analyse", "analyze"):
        assert cli.main([command, str(tmp_path / "none"), "--out", str(tmp_path / "out")]) == 2
        assert capsys.readouterr().err == f"error: {tmp_path / 'none'}: not a folder\n"
    with pytest.raises(SystemExit) as done:
        cli.main(["simulate", "--help"])
    assert done.value.code == 0 and "--profile" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "usage"),
    [
        (["run", "--help"], "usage: vllm-stress run "),
        (["search", "--help"], "usage: vllm-stress search "),
        (["plan", "--help"], "usage: vllm-stress plan "),
        (["analyse", "--help"], "usage: vllm-stress analyse "),
        (["analyse", "compare", "--help"], "usage: vllm-stress analyse compare "),
        (["analyze", "history", "--help"], "usage: vllm-stress analyze history "),
        (["simulate", "--help"], "usage: vllm-stress simulate "),
    ],
)
def test_each_tools_help_names_the_command_that_ran_it(argv, usage, capsys):
    with pytest.raises(SystemExit) as done:
        cli.main(argv)
    out = capsys.readouterr().out
    assert done.value.code == 0 and out.startswith(usage) and "python -m" not in out


def test_the_python_m_form_keeps_its_own_name(capsys):
    with pytest.raises(SystemExit):
        scenarios_cli.main(["run", "--help"])
    assert capsys.readouterr().out.startswith("usage: python -m scenarios run ")


def test_the_locustfile_help_lists_every_user_class_of_the_registry(capsys):
    """One registry (vllm_stress.users.LOCUSTFILES): the package's user modules, the repository's locustfiles/ and
    the help all name the same classes, the session user included."""
    assert set(LOCUSTFILES) == {path.stem for path in (REPO / "locustfiles").glob("*.py")}
    assert all((PACKAGE / "users" / f"{name}.py").is_file() for name in LOCUSTFILES) and "session" in LOCUSTFILES
    for argv in (["locustfile", "--help"], ["--help"]):
        assert cli.main(argv) == 0
        assert f"({', '.join(LOCUSTFILES)}; chat by default)" in capsys.readouterr().out
