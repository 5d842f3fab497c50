"""`python -m scenarios whatif`: its --vary flags, its cells, and a small matrix run on a twin whose answer is known
(docs/guides/twin.md)."""

from __future__ import annotations

import pandas as pd
import pytest

from tests.helpers import small_run
from vllm_stress.scenarios.cli import main as scenarios_main
from vllm_stress.scenarios.run.errors import ScenarioError
from vllm_stress.scenarios.studies import calibrate, whatif
from vllm_stress.simulator.model.profiles import load_profile


def test_vary_parses_settings_and_workloads_into_every_combination():
    varied = whatif.parse_vary(["max-num-seqs=4,16", "--input-tokens=1024", "prefix-share=0,0.33"])
    assert varied == {"max-num-seqs": ["4", "16"], "input-tokens": ["1024"], "prefix-share": ["0", "0.33"]}
    cells = whatif.matrix_cells(varied)
    assert len(cells) == 4
    assert cells[1] == whatif.Cell({"max-num-seqs": "4"}, {"input-tokens": "1024", "prefix-share": "0.33"})
    assert cells[1].name == "max-num-seqs=4 input-tokens=1024 prefix-share=0.33"


@pytest.mark.parametrize(
    ("texts", "message"),
    [
        (["max-num-seqs"], "expected NAME=VALUE,VALUE"),
        (["max-num-seqs="], "expected NAME=VALUE,VALUE"),
        (["replicas=1,2"], "unknown setting 'replicas'"),
        (["max-num-seqs=4,abc"], "'abc' is not a whole number"),
        (["max-num-seqs=0"], "'0' is not a whole number of at least 1"),
        (["input-tokens=1.5"], "'1.5' is not a whole number"),
        (["prefix-share=1.5"], "'1.5' is not a share from 0 to 1"),
        (["max-num-seqs=4", "max-num-seqs=8"], "given twice"),
    ],
)
def test_vary_refuses_bad_input_in_one_line(texts, message):
    with pytest.raises(ScenarioError, match=message) as error:
        whatif.parse_vary(texts)
    assert "\n" not in str(error.value)


def test_too_many_cells_are_refused():
    with pytest.raises(ScenarioError, match="17 cells, at most 16"):
        whatif.matrix_cells({"max-num-seqs": [str(n) for n in range(1, 18)]})


def test_prefix_share_becomes_prefix_tokens_of_the_cells_prompt():
    assert whatif.workload_args({"prefix-share": "0.25", "input-tokens": "400"}, 128, 64) == [
        "--input-tokens=400",
        "--output-tokens=64",
        "--prefix-tokens=100",
    ]
    assert whatif.workload_args({}, 128, 64) == ["--input-tokens=128", "--output-tokens=64"]
    with pytest.raises(ScenarioError, match="shorter than the prompt"):
        whatif.workload_args({"prefix-share": "1"}, 128, 64)


def twin_profile(path):
    twin = load_profile("cpu-tiny").replace(twin_source="sweep/run-1", twin_error="median |error| 1%")
    path.write_text(calibrate.profile_toml(twin))
    return path


def test_a_plain_profile_is_not_a_twin(tmp_path, capsys):
    plain = tmp_path / "plain.toml"
    plain.write_text(calibrate.profile_toml(load_profile("cpu-tiny")))
    code = scenarios_main(["whatif", "--profile", str(plain), "--baseline", str(tmp_path), "--vary", "max-num-seqs=4"])
    assert code == 2
    assert "not a calibrated twin" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--step-time", "600", "--levels", "1,2,3,4,5"], "take about 202 min, over --max-minutes 60"),
        (["--step-time", "soon"], "--step-time must be a number of seconds"),
        (["--levels", "4,x"], "--levels must be comma-separated whole numbers"),
    ],
)
def test_a_matrix_too_long_or_badly_paced_is_refused_before_it_starts(tmp_path, capsys, extra, message):
    baseline = small_run(tmp_path / "baseline")
    profile = str(twin_profile(tmp_path / "twin.toml"))
    vary = ["--vary", "max-num-seqs=1,2,3,4"]
    args = ["whatif", "--profile", profile, "--baseline", str(baseline), "--scenario", "smoke", *vary, *extra]
    assert scenarios_main([*args, "--out", str(tmp_path / "whatif")]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "whatif").exists()


def test_whatif_halving_max_num_seqs_on_the_twin_halves_throughput(scenarios, tmp_path):
    """At 4 users a twin allowed 1 running sequence decodes one at a time: its output tok/s is far below the twin
    allowed 4, and its requests queue for their first token."""
    baseline = small_run(tmp_path / "baseline")
    code = scenarios(
        [
            "whatif",
            *("--profile", str(twin_profile(tmp_path / "twin.toml")), "--baseline", str(baseline)),
            *(
                "--scenario",
                "smoke",
                "--levels",
                "4",
                "--step-time",
                "2",
                "--vary",
                "max-num-seqs=1,4",
                "--workers",
                "1",
            ),
            *("--out", str(tmp_path / "whatif")),
        ]
    )
    assert code == 0
    table = pd.read_csv(tmp_path / "whatif" / whatif.CSV_FILE).set_index("cell")
    one, four = table.loc["max-num-seqs=1"], table.loc["max-num-seqs=4"]
    assert one["output_tokens_per_s"] < 0.5 * four["output_tokens_per_s"]
    assert one["ttft_p50_s"] > 2 * four["ttft_p50_s"]
    assert list(table.loc[whatif.BASELINE, "users"]) == [5, 10]  # the baseline's own levels beside the cells
    first_line = (tmp_path / "whatif" / whatif.MD_FILE).read_text().splitlines()[0]
    assert first_line.startswith("**Twin — predicted, not measured:**") and "sweep/run-1" in first_line
