"""vllm_stress.analysis.report.document: what the report says of a level and of a saturation point, from the summary's
own fields (the whole report from synthetic runs: test_analysis_cli.py)."""

from typing import Any, cast

from vllm_stress.analysis.report.document import level_flags, overview, saturation_reason
from vllm_stress.analysis.summary import ConfigSummary, Summary, simulated


def level(users: int, **fields: Any) -> dict[str, Any]:
    return {"users": users, "partial": False, "underloaded": False, **fields}


def config(saturation_users: int | None, *levels: dict[str, Any]) -> ConfigSummary:
    return cast(ConfigSummary, {"saturation_users": saturation_users, "levels": list(levels)})


def test_a_level_says_everything_that_limits_what_it_measured():
    assert level_flags(level(10)) == ""
    flagged = level(
        1000,
        partial=True,
        underloaded=True,
        concurrency_mean=1234.4,
        bound="server-bound: waiting requests",
        aborted=3,
        off_target=1,
        unstable=["output_tokens_per_s", "e2e_p99_s"],
    )
    assert level_flags(flagged) == (
        "partial; underloaded: 1,234 in flight; server-bound: waiting requests; 3 aborted at the stop; "
        "1 off their token targets; unstable: output_tokens_per_s, e2e_p99_s"
    )


def test_the_saturation_reason_is_the_first_bound_from_the_saturation_point_on():
    held = {"server_in_system_mean": 50.0}
    levels = (
        level(50, bound="client-bound (a load generator at 95 % CPU)", **held),  # below the saturation point
        level(100, bound="", **held),
        level(200, bound="server-bound: waiting requests", **held),
    )
    assert saturation_reason(config(100, *levels)) == "server-bound: waiting requests from 200 users"
    assert saturation_reason(config(100, levels[1])) == (
        "no queueing and nothing held back: the server's compute or bandwidth"
    )
    assert saturation_reason(config(100, level(100))) == "- (no server_metrics.csv or client_health.csv)"
    assert saturation_reason(config(None, *levels)) == "-"


def test_the_first_line_says_what_was_simulated():
    launch = {
        "kind": "simulator",
        "command": ["python", "-m", "vllm_stress.simulator", "--profile", "p", "--set", "a=1"],
    }
    args = simulated({"server_launch": launch})
    assert args == "--profile p --set a=1"
    assert simulated({"server_launch": {"kind": "server-cmd", "command": ["vllm", "serve"]}}) is None
    assert simulated({}) is None  # a server the runner did not start
    unsteady = {"runs": 1, "peak": None, "recommendations": None, "levels": [], "simulated": args}
    text = overview(cast(Summary, {"configs": {"demo": unsteady}}))
    assert text.startswith(
        "demo: simulated — the embedded vLLM simulator, no GPU: `--profile p --set a=1`. demo (1 run)"
    )
