"""vllm_stress.cli: the ``vllm-stress`` command, the front end — each command of its registry reaches its tool
through the installed entry point, and ``vllm-stress locustfile`` names the files for ``locust -f`` (the installed
package: test_install.py)."""

import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from tests.helpers import REPO
from vllm_stress import cli
from vllm_stress.scenarios import cli as scenarios_cli
from vllm_stress.scenarios.run.config import scenario_names
from vllm_stress.scenarios.run.runner import SHAPE
from vllm_stress.users import LOCUSTFILES

PACKAGE = Path(cli.__file__).parent


ENTRY_POINT = Path(sys.executable).parent / "vllm-stress"  # the venv's console script, as a user runs it


def every_parser() -> list[str]:
    """Each command of the registry and each of its subcommands, as typed after ``vllm-stress``."""
    return [
        parser.prog.removeprefix(f"{cli.PROG} ")
        for command in cli.COMMANDS
        for parser in command.parsers(f"{cli.PROG} {command.name}")
    ]


def test_every_command_of_the_registry_answers_help(capsys):
    """The same list as the reference page (docsgen): a command the help names but ``vllm-stress`` refuses fails."""
    commands = every_parser()
    assert {"run", "list", "whatif", "router-overhead", "analyse compare", "calibrate", "locustfile"} <= set(commands)
    for command in commands:
        try:
            code = cli.main([*command.split(), "--help"])
        except SystemExit as e:  # argparse's exit after the help
            code = e.code
        out = capsys.readouterr().out
        assert code == 0 and out.startswith(f"usage: vllm-stress {command} "), (command, code, out[:200])


def test_the_installed_entry_point_runs_a_command():
    """The venv's console script, as a user runs it, reaches a command's tool (one process: the commands' help is
    the test above's, in this one)."""
    run = subprocess.run(
        [str(ENTRY_POINT), "analyse", "compare", "--help"], capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0 and run.stdout.startswith("usage: vllm-stress analyse compare "), run.stderr


def test_help_version_and_a_bad_command(capsys):
    assert cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    assert all(f"vllm-stress {command.name} " in out for command in cli.COMMANDS)
    assert cli.main([]) == 2 and cli.main(["bogus"]) == 2
    err = capsys.readouterr().err
    assert err.count("vllm-stress locustfile [NAME]") == 2 and "unknown command 'bogus'" in err
    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out == f"vllm-stress {version('vllm-stress')}\n"


def test_list_is_a_table_with_each_scenarios_bound(capsys):
    assert cli.main(["list"]) == 0
    header, *rows = capsys.readouterr().out.splitlines()
    assert header.split() == ["scenario", "user", "tokens", "in/out", "levels", "runs", "takes", "at", "most"]
    assert [row.split()[0] for row in rows] == scenario_names()
    quickstart = next(row.split() for row in rows if row.startswith("quickstart "))
    assert quickstart == ["quickstart", "chat", "2048/512", "10,50,100,200,500,1000", "1", "15", "min", "(max-minutes)"]
    smoke = next(row.split() for row in rows if row.startswith("smoke "))
    # 2 levels of 1 s ramp, a warm-up of at most --max-step-time (600 s by default), 4 s hold, 30 s margin; 120 s
    assert smoke[:5] == ["smoke", "chat", "128/32", "2,4", "1"] and smoke[5:] == [f"{(2 * 635 + 120) // 60}", "min"]
    assert len({row.index(" chat ") for row in rows}) == 1  # aligned


def test_locustfiles_are_the_packages_files(capsys):
    assert cli.main(["locustfile"]) == 0 and cli.main(["locustfile", "session"]) == 0
    assert cli.main(["locustfile", "shape"]) == 0
    printed = [Path(line) for line in capsys.readouterr().out.splitlines()]
    assert printed == [PACKAGE / "users" / "chat.py", PACKAGE / "users" / "session.py", SHAPE]
    assert all(path.is_file() for path in printed) and SHAPE == PACKAGE / "scenarios" / "shapes" / "shape.py"
    with pytest.raises(SystemExit) as refused:
        cli.locustfile("nope")
    assert (
        str(refused.value)
        == "error: no locustfile 'nope' (one of: chat, completions, responses, messages, embeddings, rerank, score, "
        "audio, generate, sdk, session, agent) or shape"
    )


def test_each_command_reaches_its_tool(tmp_path, capsys):
    assert cli.main(["plan", "--users", "1000", "--tokens-per-s-per-stream", "10", "--cores-per-machine", "2"]) == 0
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
        (["whatif", "--help"], "usage: vllm-stress whatif "),
        (["router-overhead", "--help"], "usage: vllm-stress router-overhead "),
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
    with pytest.raises(SystemExit) as done:
        cli.main(["locustfile", "--help"])
    assert done.value.code == 0
    assert f"a user class ({', '.join(LOCUSTFILES)}) or the step ramp's shape" in " ".join(
        capsys.readouterr().out.split()
    )


def test_the_suites_options_in_locusts_help(run_locust):
    """``locust -f locustfiles/chat.py --help`` lists Locust's options only (Locust answers --help before it imports
    the locustfile that adds the suite's); ``vllm-stress locustfile NAME --locust-help`` prints the same help with
    them. Should Locust change that, the first assertion fails and the docs can send users to plain Locust again."""
    plain = run_locust("-f", "locustfiles/chat.py", "--help")
    assert plain.returncode == 0 and "--headless" in plain.stdout and "--output-tokens" not in plain.stdout
    for name, option in (("chat", "--output-tokens"), ("shape", "--max-minutes")):
        ours = subprocess.run(
            [str(ENTRY_POINT), "locustfile", name, "--locust-help"], capture_output=True, text=True, timeout=120
        )
        assert ours.returncode == 0 and ours.stdout.startswith(plain.stdout.split("\n")[0])
        assert "--headless" in ours.stdout and option in ours.stdout
