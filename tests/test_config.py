"""A scenario's settings (vllm_stress/scenarios/run/config.py): config files, matrix cells and the ramp options a Locust
command line overrides."""

from __future__ import annotations

import pytest

from vllm_stress.scenarios.run import config
from vllm_stress.scenarios.run.config import (
    cell_args,
    cell_name,
    header_comment,
    read_config,
    read_matrix,
    scenario_names,
    with_overrides,
)
from vllm_stress.scenarios.run.errors import ScenarioError
from vllm_stress.scenarios.shapes.levels import longest_run_s


def test_the_bundled_scenarios_are_listed_and_read():
    assert {"smoke", "demo", "mi325x-sweep"} <= set(scenario_names())
    path, keys = read_config("smoke")
    assert path.name == "smoke.conf" and path.is_file()
    assert keys["levels"] == "2,4" and keys["simulator"] == "--profile cpu-tiny"
    assert header_comment(path)[0].startswith("smoke: a few seconds")


def test_a_config_file_is_read_as_locust_reads_it(tmp_path, monkeypatch):
    (tmp_path / "mine.conf").write_text(
        '# first line\n# second line\nlevels = 3,6  # two levels\nstep-time = "auto"\n\nsimulator = --a b\n'
    )
    monkeypatch.setattr(config, "CONFIGS", tmp_path)
    path, keys = read_config("mine")
    assert keys == {"levels": "3,6", "step-time": "auto", "simulator": "--a b"}
    assert header_comment(path) == ["first line", "second line"]


@pytest.mark.parametrize(
    ("text", "message"),
    [("levels = 0,5\n", "at least 1 user"), ("warmup = soon\n", "--warmup must be a number of seconds")],
)
def test_a_bad_ramp_in_a_config_is_one_error_naming_the_file(tmp_path, monkeypatch, text, message):
    (tmp_path / "bad.conf").write_text(text)
    monkeypatch.setattr(config, "CONFIGS", tmp_path)
    with pytest.raises(ScenarioError, match=message) as error:
        read_config("bad")
    assert str(error.value).startswith(str(tmp_path / "bad.conf"))


def test_an_unknown_scenario_names_the_known_ones():
    with pytest.raises(ScenarioError, match=r"unknown scenario 'nope' \(known: .*smoke"):
        read_config("nope")


def test_matrix_cells_become_server_flags_and_folder_names(tmp_path):
    path = tmp_path / "cells.toml"
    path.write_text('[[cell]]\nmax-num-seqs = 256\nmax-num-batched-tokens = 8192\n\n[[cell]]\nkv-cache-dtype = "fp8"\n')
    first, second = read_matrix(str(path))
    assert first == {"max-num-seqs": "256", "max-num-batched-tokens": "8192"}
    assert cell_args(first) == ["--max-num-seqs", "256", "--max-num-batched-tokens", "8192"]
    assert cell_name(first) == "seqs-256_batched-tokens-8192" and cell_name(second) == "kv-cache-dtype-fp8"
    assert cell_name({}) == "default" and cell_args({}) == []


def test_a_file_without_cells_is_refused(tmp_path):
    path = tmp_path / "cells.toml"
    path.write_text("[cells]\nx = 1\n")
    with pytest.raises(ScenarioError, match="not a matrix file of \\[\\[cell\\]\\] tables \\(KeyError"):
        read_matrix(str(path))
    with pytest.raises(ScenarioError, match="OSError|FileNotFoundError"):
        read_matrix(str(tmp_path / "missing.toml"))


def test_run_time_limit_follows_locust_arg_overrides():
    keys = {"levels": "10,100", "step-time": "120", "warmup": "30"}
    merged = with_overrides(keys, ["--step-time=600", "--output-tokens", "64", "--max-step-time", "900"])
    assert merged == {"levels": "10,100", "step-time": "600", "warmup": "30", "max-step-time": "900"}
    assert with_overrides(keys, ["--step", "5"]) == keys  # no abbreviations: Locust would not take them either
    longer = with_overrides(keys, ["--step-time=600"])
    assert longest_run_s(longer) - longest_run_s(keys) == 2 * (600 - 120)


def test_runs_own_options_stand_for_the_locust_arguments_of_the_same_name():
    from vllm_stress.scenarios.cli import build_parser, run_options

    args = build_parser().parse_args(
        ["run", "--levels", "10,50", "--repeats", "2", "--slo", "ttft=2s", "--max-minutes", "15", "--model", "m"]
    )
    given = run_options(args)
    assert given == ["--model=m", "--levels=10,50", "--repeats=2", "--max-minutes=15.0", "--slo=ttft=2s"]
    keys = with_overrides({"levels": "1,2", "repeats": "5", "gpus": "4"}, ["--locust-arg-first=1", *given])
    assert keys == {"levels": "10,50", "repeats": "2", "gpus": "4", "max-minutes": "15.0", "slo": "ttft=2s"}
    for bad in (["--repeats", "0"], ["--workers", "-1"], ["--max-minutes", "-5"]):
        with pytest.raises(ScenarioError, match="must be at least"):
            run_options(build_parser().parse_args(["run", *bad]))


def test_a_scenario_file_sets_the_same_names_locust_takes_them_all(tmp_path):
    """Each of run's options is a Locust option too (the user class's or the step ramp's), so a scenario's config file
    may set it: Locust reads the file and refuses a key it does not know."""
    from vllm_stress.docsgen import locust_options_page
    from vllm_stress.scenarios.cli import RUN_OPTIONS

    page = locust_options_page()
    assert all(f"`--{name} " in page for name in RUN_OPTIONS)


def test_the_report_options_of_a_scenario_file():
    keys = {"gpus": "8", "gpu-hour-price": "2.5", "slo": "ttft_p99=2s,tpot=50"}
    assert config.report_options(keys) == {"gpus": 8, "gpu_hour_price": 2.5, "slo": {"ttft": 2.0, "tpot": 0.05}}
    assert config.report_options({}) == {"gpus": None, "gpu_hour_price": None, "slo": None}
    with pytest.raises(ScenarioError, match="--gpus must be at least 1"):
        config.report_options({"gpus": "0"})
    with pytest.raises(ScenarioError, match="slo: --slo: success=99% is not a per-request latency limit"):
        config.report_options({"slo": "success=99%"})
