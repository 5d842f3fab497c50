"""python -m analysis compare / history / --export-vllm: differences, the regression gate, vLLM's result JSON and the
results store. The synthetic runs have exact answers (vllm_stress.analysis.io.synthetic); the last test runs the
simulator."""

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from tests.helpers import run_cli, small_run
from vllm_stress.analysis.compare import compare
from vllm_stress.analysis.io import store, vllm_json
from vllm_stress.analysis.io.synthetic import closed_loop_rows, step_levels, write_run
from vllm_stress.core.capacity import usd_per_million_tokens

GATE = "output_tok_s<-5%,e2e_p50>+10%"

# A vllm bench serve --save-result file in vLLM's own layout (vllm/benchmarks/serve.py, default percentile metrics
# ttft,tpot,itl and --metric-percentiles 99; no e2el keys), at --max-concurrency 10.
VLLM_RESULT = {
    "date": "20251120-101500",
    "endpoint_type": "openai-chat",
    "backend": "openai-chat",
    "label": None,
    "model_id": "m",
    "tokenizer_id": "m",
    "num_prompts": 200,
    "request_rate": "inf",
    "burstiness": 1.0,
    "max_concurrency": 10,
    "duration": 101.2,
    "completed": 198,
    "failed": 2,
    "total_input_tokens": 405504,
    "total_output_tokens": 19800,
    "request_throughput": 1.9565,
    "request_goodput": None,
    "output_throughput": 195.65,
    "total_token_throughput": 4202.6,
    "max_output_tokens_per_s": 230.0,
    "max_concurrent_requests": 10,
    "rtfx": 0.0,
    "mean_ttft_ms": 480.1,
    "median_ttft_ms": 470.0,
    "std_ttft_ms": 40.2,
    "p99_ttft_ms": 610.5,
    "mean_tpot_ms": 45.0,
    "median_tpot_ms": 44.9,
    "std_tpot_ms": 1.1,
    "p99_tpot_ms": 48.0,
    "mean_itl_ms": 45.0,
    "median_itl_ms": 44.8,
    "std_itl_ms": 3.0,
    "p99_itl_ms": 60.1,
}


def baseline_and_candidate(tmp_path, candidate_loops=(5, 8)):
    """Level 10 of the baseline keeps 10 users busy (200 output tok/s); the candidate's only ``candidate_loops``."""
    return small_run(tmp_path / "base", loops=(5, 10)), small_run(tmp_path / "cand", loops=candidate_loops)


def test_fail_on_parses_limits_and_refuses_others():
    limits = compare.parse_fail_on("output_tok_s<-5%, ttft_p99>+10%")
    assert [(limit.metric, limit.direction, limit.change) for limit in limits] == [
        ("output_tok_s", "<", -0.05),
        ("ttft_p99", ">", 0.10),
    ]
    assert limits[0].crossed(-0.06) and not limits[0].crossed(-0.04)
    for bad in ("output<-5%", "ttft_p99>10ms", "ttft_p99=+10%"):
        with pytest.raises(compare.AnalysisError, match="--fail-on"):
            compare.parse_fail_on(bad)


def test_a_throughput_drop_fails_the_gate(tmp_path, capsys):
    base, cand = baseline_and_candidate(tmp_path)
    code, out, _ = run_cli(capsys, "compare", base, cand, "--fail-on", GATE, "--out", tmp_path / "cmp")
    assert code == 1
    assert "regression: 10 users: output_tok_s 200 -> 160 (-20.0 %" in out and "minimum effect 10%" in out
    document = json.loads((tmp_path / "cmp" / "compare.json").read_text())
    flagged = {(d["users"], d["metric"]) for d in document["differences"] if d["regression"]}
    assert flagged == {(10, "output_tok_s")}  # level 5 is the same on both sides; e2e did not change
    same = next(d for d in document["differences"] if d["users"] == 5 and d["metric"] == "output_tok_s")
    assert same["relative"] == pytest.approx(0, abs=1e-9) and not same["significant"]
    report = (tmp_path / "cmp" / "compare.md").read_text()
    assert "## Regressions" in report and "Welch" in report and "![Throughput vs concurrency](throughput.png)" in report
    assert (tmp_path / "cmp" / "throughput.png").stat().st_size > 0 and (tmp_path / "cmp" / "compare.html").is_file()


def test_the_same_configuration_twice_flags_nothing(tmp_path, capsys):
    base, cand = baseline_and_candidate(tmp_path, candidate_loops=(5, 10))
    code, out, _ = run_cli(capsys, "compare", "--baseline", base, "--candidate", cand, "--fail-on", GATE)
    assert code == 0 and "compared 2 level(s): 0 regression(s)" in out


def test_the_cost_per_million_output_tokens_on_both_sides(tmp_path, capsys):
    """The candidate's GPUs cost 20 % less an hour: at 5 users (100 tok/s on both sides) its tokens cost 20 % less,
    at 10 users it makes 20 % fewer (160 against 200 tok/s) and they cost the same."""
    base, cand = baseline_and_candidate(tmp_path)
    out = tmp_path / "cmp"
    code, lines, err = run_cli(
        capsys, "compare", base, cand, "--gpus", "4", "--gpu-hour-price", "2.5", "--gpu-hour-price", "candidate=2",
        "--out", out,
    )  # fmt: skip
    assert code == 0, err
    document = json.loads((out / "compare.json").read_text())
    assert document["pricing"] == {
        "baseline": {"gpus": 4, "gpu_hour_price": 2.5},
        "candidate": {"gpus": 4, "gpu_hour_price": 2.0},
    }
    tok_s = {(d["users"], side): d[side] for d in document["differences"] if d["metric"] == "output_tok_s"
             for side in ("baseline", "candidate")}  # fmt: skip
    costs = {cost["users"]: cost for cost in document["costs"]}
    for users, cost in costs.items():  # exactly the report's formula on each side's mean output tok/s
        assert cost["baseline"] == usd_per_million_tokens(tok_s[users, "baseline"], 2.5, 4)
        assert cost["candidate"] == usd_per_million_tokens(tok_s[users, "candidate"], 2.0, 4)
        assert cost["change"] == cost["candidate"] - cost["baseline"]
    assert costs[5]["baseline"] == pytest.approx(2.5 * 4 / (100 * 3600) * 1e6)  # $27.78
    assert costs[5]["candidate"] == pytest.approx(2.0 * 4 / (100 * 3600) * 1e6) and costs[5]["relative"] == (
        pytest.approx(-0.2)
    )
    assert costs[10]["baseline"] == pytest.approx(2.5 * 4 / (200 * 3600) * 1e6)  # $13.89 on both sides
    assert costs[10]["relative"] == pytest.approx(0, abs=1e-9)
    assert "cost: 5 users: $27.78 -> $22.22 per million output tokens (-20.0 %)" in lines
    assert "cost: 10 users: $13.89 -> $13.89 per million output tokens (" in lines  # ±0.0 %: rounding
    report = (out / "compare.md").read_text()
    assert "baseline 4 GPUs at $2.50/h; candidate 4 GPUs at $2.00/h" in report
    assert "| 5 | $27.78 | $22.22 | -20.0 % |" in report


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--gpu-hour-price", "2"], "--gpu-hour-price: give the price and the GPUs (--gpus) of the baseline too"),
        (["--gpus", "2", "--gpu-hour-price", "baseline=2"], "the GPUs (--gpus) of the candidate too"),
        (["--gpus", "base=2", "--gpu-hour-price", "2"], "--gpus, --gpu-hour-price: base is not a side"),
    ],
)
def test_compare_prices_both_sides_or_refuses(tmp_path, capsys, args, message):
    base, cand = baseline_and_candidate(tmp_path)
    code, _, err = run_cli(capsys, "compare", base, cand, *args)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


def one_level(output_tok_s: float) -> pd.DataFrame:
    """A side with one steady run at 8 users and only an output tok/s."""
    level = {field: math.nan for field in compare.METRICS.values()} | {"output_tokens_per_s": output_tok_s}
    return pd.DataFrame([level | {"users": 8, "runs": 1, "steady": True}]).set_index("users")


def test_a_single_run_change_under_the_minimum_effect_does_not_gate():
    limits = compare.parse_fail_on("output_tok_s<-1%")
    (small,) = compare.differences(one_level(100.0), one_level(95.0), limits)
    assert small.crossed == ["output_tok_s<-1%"] and not small.significant and not small.regression
    (large,) = compare.differences(one_level(100.0), one_level(89.0), limits)
    assert large.test == "minimum effect 10%" and large.significant and large.regression


def test_repeats_are_tested_with_welch(tmp_path, capsys):
    """Two repeats a side: the CI of the change comes from their spread (Welch), not from a minimum effect; repeats
    this far apart leave a 21 % drop within the noise."""
    base = [small_run(tmp_path / f"b{i}", loops=(5, n)) for i, n in enumerate((10, 9))]
    cand = [small_run(tmp_path / f"c{i}", loops=(5, n)) for i, n in enumerate((8, 7))]
    sides = [",".join(str(p) for p in base), ",".join(str(p) for p in cand)]
    code, out, _ = run_cli(capsys, "compare", *sides, "--fail-on", "output_tok_s<-5%", "--out", tmp_path / "cmp")
    assert code == 0
    diff = next(
        d
        for d in json.loads((tmp_path / "cmp" / "compare.json").read_text())["differences"]
        if d["users"] == 10 and d["metric"] == "output_tok_s"
    )
    # means 190 and 150 tok/s, each side's standard deviation sqrt(200): se = sqrt(200), df = 2, t(2) = 4.3027
    assert diff["change"] == pytest.approx(-40) and diff["ci95"] == pytest.approx(4.3027 * math.sqrt(200), rel=1e-4)
    assert diff["test"] == "Welch t" and diff["crossed"] == ["output_tok_s<-5%"] and not diff["significant"]


def test_reads_a_vllm_bench_serve_result(tmp_path, capsys):
    path = tmp_path / "vllm.json"
    path.write_text(json.dumps(VLLM_RESULT))
    (level,) = vllm_json.read_results(path)
    row = level.iloc[0]
    assert row["users"] == 10 and row["requests"] == 200 and row["failures"] == 2
    assert row["output_tokens_per_s"] == 195.65 and row["requests_per_s"] == 1.9565
    assert row["ttft_p50_s"] == pytest.approx(0.470) and row["ttft_p99_s"] == pytest.approx(0.6105)
    assert row["tpot_p99_s"] == pytest.approx(0.048) and row["e2e_p99_s"] != row["e2e_p99_s"]  # no e2el: NaN
    assert not row["steady"]
    base = small_run(tmp_path / "base", loops=(5, 10))
    code, out, _ = run_cli(capsys, "compare", base, path, "--fail-on", GATE, "--out", tmp_path / "cmp")
    assert code == 0 and "1 not steady (ungated)" in out  # -2 % tok/s, and a vLLM result never gates
    report = (tmp_path / "cmp" / "compare.md").read_text()
    assert "## 10 users (ungated)" in report and "vllm bench serve result" in report
    assert "Levels on one side only (not compared): baseline [5]" in report


# Written by vllm bench serve (vllm/benchmarks/serve.py, run from deploy/real-vllm.sh's vLLM) against the simulator
# (--max-num-seqs 8): --backend openai-chat --dataset-name random --random-input-len 128 --random-output-len 32
# --num-prompts 400 --max-concurrency 8 --ignore-eos --percentile-metrics ttft,tpot,itl,e2el --metric-percentiles 50,99
# --save-result; its two per-request lists (latencies, queue_times) left out and tokenizer_id made relative.
VLLM_FILE = Path(__file__).parent / "fixtures" / "vllm-bench-serve-c8.json"


def test_reads_what_vllm_bench_serve_wrote(tmp_path, capsys):
    (level,) = vllm_json.read_results(VLLM_FILE)
    row = level.iloc[0]
    assert row["users"] == 8 and row["requests"] == 400 and row["failures"] == 0
    assert row["output_tokens_per_s"] == pytest.approx(2703.64, abs=0.01)  # vLLM printed 2703.64
    assert row["total_tokens_per_s"] == pytest.approx(7405.24, abs=0.01)
    assert row["ttft_p50_s"] == pytest.approx(0.01654, abs=1e-5)
    assert row["e2e_p99_s"] == pytest.approx(0.10607, abs=1e-5)
    assert row["itl_p99_s"] == pytest.approx(0.00922, abs=1e-5)
    base = write_run(
        tmp_path / "base",
        closed_loop_rows(8, 0.0, 60.0, 0.1, completion_tokens=32, prompt_tokens=128),
        step_levels([8], hold_s=50.0, t0=0.0),
    )
    code, out, _ = run_cli(capsys, "compare", base, VLLM_FILE, "--out", tmp_path / "cmp")
    document = json.loads((tmp_path / "cmp" / "compare.json").read_text())
    assert code == 0 and document["ungated"] == {"8": "candidate not steady (" + vllm_json.NO_VERDICT + ")"}
    e2e = next(d for d in document["differences"] if d["metric"] == "e2e_p50")
    assert e2e["baseline"] == pytest.approx(0.1) and e2e["candidate"] == pytest.approx(0.09357, abs=1e-5)


def test_appended_results_and_one_per_line(tmp_path):
    lines = [VLLM_RESULT | {"max_concurrency": users} for users in (10, 10, 20)]
    path = tmp_path / "append.json"
    path.write_text("\n".join(json.dumps(line) for line in lines))  # vllm bench serve --append-result
    levels = compare.aggregate(compare.load_side([str(path)], None))
    assert levels["runs"].to_dict() == {10: 2, 20: 1}


def test_export_writes_vllm_results_that_compare_equal_to_the_run(tmp_path, capsys):
    run = small_run(tmp_path / "run", model="m", loops=(5, 10))
    code, _, _ = run_cli(capsys, run, "--out", tmp_path / "report", "--export-vllm", tmp_path / "vllm")
    assert code == 0
    files = sorted((tmp_path / "vllm").rglob("run=0.json"))
    assert [f.parent.name for f in files] == ["max_concurrency=10", "max_concurrency=5"]
    result = json.loads(files[0].read_text())
    assert set(VLLM_RESULT) - set(result) <= {
        "max_output_tokens_per_s",
        "max_concurrent_requests",
        "rtfx",
        "mean_ttft_ms",
        "std_ttft_ms",
        "mean_tpot_ms",
        "std_tpot_ms",
        "mean_itl_ms",
        "std_itl_ms",
        "median_itl_ms",
        "p99_itl_ms",
    }
    # left out: what the analysis does not measure, and ITL (this run has no itl_histogram.csv)
    assert result["max_concurrency"] == 10 and result["output_throughput"] == pytest.approx(200)
    assert result["p99_e2el_ms"] == pytest.approx(5000) and result["steady"] is True
    summary = json.loads((files[0].parent / "summary.json").read_text())
    assert summary == [result]  # the layout vllm bench sweep writes: a list of the level's runs
    for exported in (",".join(str(f.parent / "summary.json") for f in files), tmp_path / "vllm"):  # or the folder
        code, out, _ = run_cli(capsys, "compare", run, exported, "--fail-on", "output_tok_s<-0.1%,e2e_p99>+0.1%")
        assert code == 0 and "compared 2 level(s): 0 regression(s)" in out and "ungated" not in out


def test_the_store_records_lists_and_compares(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv(store.DB_ENV, raising=False)
    base, cand = baseline_and_candidate(tmp_path)
    db = tmp_path / "results.db"
    run_cli(capsys, base, "--out", tmp_path / "r0")
    assert not db.exists()  # nothing is stored unless asked
    code, out, _ = run_cli(capsys, base, "--out", tmp_path / "r1", "--label", "base", "--db", db)
    assert code == 0 and "recorded in the results store as db:1" in out
    monkeypatch.setenv(store.DB_ENV, str(db))
    run_cli(capsys, cand, "--out", tmp_path / "r2", "--label", "cand")
    code, out, _ = run_cli(capsys, "history", "--label", "cand")
    lines = out.strip().splitlines()
    assert code == 0 and len(lines) == 2 and lines[1].startswith("db:2\t") and "cand" in lines[1]
    assert str(cand.resolve()) in lines[1] and "\t2\t2\t" in lines[1]  # two levels, both steady
    code, out, _ = run_cli(capsys, "compare", "db:1", "db:2", "--fail-on", GATE)
    assert code == 1 and "regression: 10 users: output_tok_s 200 -> 160" in out
    with store.connect(db) as connection:
        ((meta, commit, verdicts),) = connection.execute("SELECT meta, suite_commit, verdicts FROM runs WHERE id = 1")
    assert json.loads(meta)["model"] == "m" and json.loads(verdicts)["peak"]["users"] == 10
    assert commit is None or len(commit) == 40


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["compare", "missing-a", "missing-b"], "missing-a: not a folder"),
        (["compare", "only-one"], "expected BASELINE CANDIDATE"),
        (["compare", "a", ","], "a side names no source"),
        (["compare", "a", "b", "--baseline", "c"], "not both"),
        (["compare", "a", "b", "--fail-on", "tok<5"], "--fail-on"),
        (["compare", "db:1", "db:2"], "no results store given"),
        (["history", "--db", "nowhere.db"], "no results store at nowhere.db"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, monkeypatch, args, message):
    monkeypatch.delenv(store.DB_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli(capsys, *args)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_a_json_that_is_not_a_closed_loop_vllm_result_is_refused(tmp_path, capsys):
    base = small_run(tmp_path / "base")
    for name, content in (("open.json", VLLM_RESULT | {"max_concurrency": None}), ("other.json", {"x": 1})):
        (tmp_path / name).write_text(json.dumps(content))
        code, _, err = run_cli(capsys, "compare", base, tmp_path / name)
        assert code == 2 and name in err and len(err.strip().splitlines()) == 1


def test_simulator_runs_differing_only_in_max_num_seqs(scenarios, tmp_path, capsys):
    """Smoke runs at its own levels, 2 and 4 users: --max-num-seqs 2 against 4 halves nothing at 2 users and caps 4
    users at the throughput of 2 (about 24 against 41 requests/s on the engine of cpu-tiny); two repeats of one
    configuration flag nothing."""
    for name, seqs, repeats in (("seq4", 4, 2), ("seq2", 2, 1)):
        assert (
            scenarios(
                [
                    "run",
                    "--scenario",
                    "smoke",
                    "--out",
                    str(tmp_path / name),
                    "--workers",
                    "1",
                    "--repeats",
                    str(repeats),
                    f"--simulator-arg=--max-num-seqs={seqs}",
                ]
            )
            == 0
        )
    capsys.readouterr()
    repeats = [str(tmp_path / "seq4" / f"run-{i}") for i in (1, 2)]
    code, out, _ = run_cli(capsys, "compare", *repeats, "--fail-on", GATE)
    assert code == 0 and "compared 2 level(s): 0 regression(s)" in out
    code, out, _ = run_cli(
        capsys, "compare", ",".join(repeats), tmp_path / "seq2" / "run-1", "--fail-on", GATE, "--out", tmp_path / "cmp"
    )
    assert code == 1
    regressions = {
        (d["users"], d["metric"])
        for d in json.loads((tmp_path / "cmp" / "compare.json").read_text())["differences"]
        if d["regression"]
    }
    assert (4, "output_tok_s") in regressions and (2, "output_tok_s") not in regressions
    assert (
        "baseline server: version 0.33.0, launched with `python -m vllm_stress.simulator --profile cpu-tiny --max-num-seqs=4`"
        in out
        and "--max-num-seqs=2`" in out
    )  # run.json tells the two servers apart


def test_the_servers_of_two_sides_are_shown_when_they_differ(tmp_path, capsys, monkeypatch):
    """run.json's server_version and server_launch reach the store, and compare names both servers when they
    differ (and nothing when they are the same or a side does not say)."""
    monkeypatch.delenv(store.DB_ENV, raising=False)
    base, cand = baseline_and_candidate(tmp_path, candidate_loops=(5, 10))
    launch = {"kind": "server-cmd", "command": ["deploy/vllm-serve.sh", "--max-num-seqs", "256"]}
    for folder, version in ((base, "0.10.2"), (cand, "0.11.0")):
        meta = json.loads((folder / "run.json").read_text())
        (folder / "run.json").write_text(json.dumps(meta | {"server_version": version, "server_launch": launch}))
    code, out, _ = run_cli(capsys, "compare", base, cand, "--out", tmp_path / "cmp")
    assert (
        code == 0
        and "baseline server: version 0.10.2, launched with `deploy/vllm-serve.sh --max-num-seqs 256`" in out
        and "candidate server: version 0.11.0" in out
    )
    assert "The servers differ: baseline version 0.10.2" in (tmp_path / "cmp" / "compare.md").read_text()
    db = tmp_path / "results.db"
    run_cli(capsys, cand, "--out", tmp_path / "r", "--db", db)
    with store.connect(db) as connection:
        ((version, meta),) = connection.execute("SELECT server_version, meta FROM runs")
    assert version == "0.11.0" and json.loads(meta)["server_launch"] == launch
    code, out, _ = run_cli(capsys, "compare", cand, "db:1", "--db", db)
    assert code == 0 and "server:" not in out  # the same server on both sides
    code, out, _ = run_cli(capsys, "compare", base, small_run(tmp_path / "plain"))
    assert code == 0 and "server:" not in out  # a side that does not say is not a difference
