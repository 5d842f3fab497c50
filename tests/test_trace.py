"""Trace replay of the bundled Mooncake-format trace on a master with two workers: every trace line is one row, sent
on schedule when the users can carry it, and reaches the server at its time in the trace whichever worker sends it;
sped up past what they can carry, the report flags the lag. The Azure, BurstGPT and Bailian samples are read, and
BurstGPT's and Bailian's replayed line for line (Bailian's 16-token blocks as the server's prefix cache found them)."""

import gzip
import json
import statistics

import pytest

from benchmarks.harness import read_rows, two_workers
from tests.helpers import NO_CANARIES, REPO
from vllm_stress.analysis.cli import main as analyse
from vllm_stress.client.trace import read_trace, select
from vllm_stress.simulator.api.requestlog import read_request_log

MOONCAKE = REPO / "scenarios" / "data" / "mooncake-sample.jsonl"
AZURE = REPO / "scenarios" / "data" / "azure-sample.csv"
BURSTGPT = REPO / "scenarios" / "data" / "burstgpt-sample.csv"
BAILIAN = REPO / "scenarios" / "data" / "bailian-sample.jsonl"
ARGS = ["--headless", "--only-summary", "--stop-timeout", "30", "-L", "INFO"]
# |arrival - due| at the server, less the lag the client reported, at the 90th percentile: workers on two schedules
# 20 ms apart put half the requests 10 ms or more off and fail it; the last few percent are a loaded machine's
# scheduler (a greenlet switch between the lag's stamp and the send), which no client can see
ARRIVAL_P90_LIMIT_MS = 10.0


def test_both_published_formats_are_read():
    mooncake, azure = read_trace(str(MOONCAKE)), read_trace(str(AZURE))
    assert len(mooncake) == len(azure) == 240 and mooncake[0].at_s == azure[0].at_s == 0
    assert mooncake[1].hash_ids and not azure[1].hash_ids
    window = select(mooncake, 10, 20, speedup=4)
    assert all(0 <= line.at_s < 5 for line in window) and len(window) == sum(10 <= x.at_s < 30 for x in mooncake)


def test_burstgpt_rows_are_read_and_the_failed_ones_left_out(caplog, tmp_path):
    caplog.set_level("INFO")
    lines = read_trace(str(BURSTGPT))
    assert len(lines) == 240 - 5 and lines[0].at_s == 0 and all(line.output_tokens > 0 for line in lines)
    assert all(line.at_s == int(line.at_s) and not line.hash_ids for line in lines)  # whole seconds, no blocks
    assert "5 requests that failed in the recorded service (Response tokens 0) left out" in caplog.text
    bad = tmp_path / "bad.csv"
    bad.write_text(BURSTGPT.read_text().splitlines()[0] + "\n0,GPT-4,many,12,12,API log\n")
    with pytest.raises(ValueError, match=r"bad\.csv:2: not a BurstGPT trace row"):
        read_trace(str(bad))


def replay(simulator, run_locust, tmp_path, name, users, speedup, duration, trace=MOONCAKE):
    """The run's rows, its level in summary.json with the traffic windows, the server's arrival stamp (kernel receive
    time, unix seconds) of each row's request with the row's schedule lag, and run.json."""
    log = tmp_path / f"{name}-requests.jsonl"
    sim = simulator("--profile", "cpu-tiny", "--request-log", str(log))
    out = tmp_path / name
    proc = run_locust(
        "-f",
        "locustfiles/chat.py",
        "-H",
        sim.url,
        "-u",
        str(users),
        "-r",
        str(users),
        "-t",
        f"{duration / speedup + 8:.0f}s",
        "--trace",
        str(trace),
        "--speedup",
        str(speedup),
        "--trace-duration",
        str(duration),
        "--results-dir",
        str(out),
        *two_workers(),
        *ARGS,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert main_report(out) == 0
    rows = read_rows(out / "requests.csv")
    summary = json.loads((out / "report" / "summary.json").read_text())
    windows = summary["traffic"][0]["windows"]  # vllm_stress/analysis/features/traces.py: per 10 s of the replay
    assert sum(w["requests"] for w in windows) == len(rows) - sum(r["error"] == "Aborted" for r in rows)
    sim.stop()  # its request log is flushed as it stops
    logged = read_request_log(str(log))
    arrivals = [
        (logged[r["request_id"]]["arrival"], float(r["schedule_lag_s"])) for r in rows if r["request_id"] in logged
    ]
    meta = json.loads((out / "run.json").read_text())
    return rows, summary["levels"][0] | {"windows": windows}, arrivals, meta


def deviations_ms(arrivals, lines, lag=False):
    """|arrival - due| of each request at the server, ms: the k-th arrival against the k-th line of the trace, both
    from their median difference (the schedule's start, robust to one late first request); with ``lag``, each
    arrival less the lateness its process reported (schedule_lag_s: a loaded process woke late), which leaves what
    the client cannot see itself, such as two workers on two schedules."""
    times = sorted(arrival - (schedule_lag if lag else 0) for arrival, schedule_lag in arrivals)
    gaps = [arrival - line.at_s for arrival, line in zip(times, lines, strict=True)]
    start = statistics.median(gaps)
    return sorted(abs(gap - start) * 1000 for gap in gaps)


def p(values, q):
    """The q-th percentile of sorted values, nearest rank."""
    return values[round(q / 100 * (len(values) - 1))]


def main_report(out):
    return analyse([str(out), "--out", str(out / "report")])


@pytest.mark.parametrize("speedup", [1, 4])
def test_every_line_is_one_row_on_schedule(simulator, run_locust, tmp_path, speedup):
    duration = 16 * speedup  # 16 s of replay at x1 (some 70 lines); at x4 the whole sample (54 s) in 13.5 s
    lines = select(read_trace(str(MOONCAKE)), 0, duration, speedup)
    rows, level, arrivals, meta = replay(simulator, run_locust, tmp_path, f"x{speedup}", 40, speedup, duration)
    assert len(rows) == len(lines)  # one row per trace line, over both workers
    deviations = deviations_ms(arrivals, lines, lag=True)  # each worker sends half the lines: both on one schedule
    raw = deviations_ms(arrivals, lines)
    print(f"arrival |deviation| at x{speedup}, {len(raw)} requests: p50 {p(raw, 50):.1f} ms, p99 {p(raw, 99):.1f} ms")
    less_lag = f"p50 {p(deviations, 50):.1f} ms, p90 {p(deviations, 90):.1f} ms, p99 {p(deviations, 99):.1f} ms"
    print(f"less the reported lag: {less_lag}; top {raw[-5:]}")
    assert p(deviations, 90) < ARRIVAL_P90_LIMIT_MS, deviations
    start = meta["schedule_start"]  # one start, sent by the master; each worker's clock offset from one round trip
    print(f"schedule start: {start}")
    assert sorted(start["workers"]) == sorted({r["worker"] for r in rows})
    for worker in start["workers"].values():  # one host, one clock: NTP's estimate is within half the round trip
        assert abs(worker["clock_offset_ms"]) <= worker["round_trip_ms"] / 2 + 0.001, start
    offsets = [worker["clock_offset_ms"] for worker in start["workers"].values()]
    assert start["skew_ms"] == pytest.approx(max(offsets) - min(offsets), abs=0.002)
    assert min(float(r["start_time"]) for r in rows) >= start["start"] - 0.001  # nothing sent before the start
    report = (tmp_path / f"x{speedup}" / "report" / "report.md").read_text()
    skew = f"their clocks were {start['skew_ms']:.1f} ms apart"
    assert f"The 2 workers counted the schedule from one start sent by the master; {skew}" in report
    assert len({r["worker"] for r in rows}) == 2
    assert sorted(int(r["target_prompt_tokens"]) for r in rows) == sorted(line.input_tokens for line in lines)
    assert all(r["count_mismatch"] == "0" for r in rows if r["ok"] == "1")  # exact lengths, as traced
    assert level["schedule_lag_p99_s"] < 0.5 and "keep up" not in level["bound"]
    assert not any(w["behind"] for w in level["windows"])


def test_a_replay_the_client_cannot_carry_is_flagged(simulator, run_locust, tmp_path):
    rows, level, _, _ = replay(simulator, run_locust, tmp_path, "too-fast", users=2, speedup=8, duration=40)
    assert level["schedule_lag_p99_s"] > 1.0 and "did not keep up with the schedule" in level["bound"]
    assert level["windows"][-1]["behind"]  # the window where the backlog built up is flagged


def test_a_burstgpt_sample_is_replayed_line_for_line(simulator, run_locust, tmp_path):
    """BurstGPT's whole seconds send its requests in bursts: every line left in is one row, its lengths exact."""
    lines = select(read_trace(str(BURSTGPT)), 0, 40, speedup=8)
    rows, level, _, _ = replay(simulator, run_locust, tmp_path, "burstgpt", 16, 8, 40, trace=BURSTGPT)
    assert len(rows) == len(lines) and level["failures"] == 0
    assert sorted(int(r["target_prompt_tokens"]) for r in rows) == sorted(line.input_tokens for line in lines)
    assert all(r["count_mismatch"] == "0" for r in rows if r["ok"] == "1")


def test_a_bailian_trace_is_read_in_seconds_with_its_16_token_blocks(tmp_path):
    """Bailian's timestamps are seconds (Mooncake's milliseconds) and its hash ids blocks of 16 tokens; gzip reads
    the same; a bad line is one line naming the file and line."""
    recorded = [json.loads(line) for line in BAILIAN.read_text().splitlines()]
    lines = read_trace(str(BAILIAN))
    first = recorded[0]["timestamp"]
    assert [line.at_s for line in lines] == pytest.approx([item["timestamp"] - first for item in recorded])
    assert [line.hash_ids for line in lines] == [tuple(item["hash_ids"]) for item in recorded]
    assert {line.block_tokens for line in lines} == {16}
    assert {line.block_tokens for line in read_trace(str(MOONCAKE))} == {512}
    packed = tmp_path / "bailian.jsonl.gz"
    packed.write_bytes(gzip.compress(BAILIAN.read_bytes()))
    assert read_trace(str(packed)) == lines
    bad = tmp_path / "bad.jsonl"
    bad.write_text(BAILIAN.read_text().splitlines()[0] + '\n{"chat_id": 7, "timestamp": "soon"}\n')
    with pytest.raises(ValueError, match=r"bad\.jsonl:2: not a Mooncake or Bailian trace line") as raised:
        read_trace(str(bad))
    assert "\n" not in str(raised.value)


def shared_prefix_blocks(lines) -> list[int]:
    """Per line, in send order: how many of its first hash ids every earlier line had sent whole (a line's last
    block is cut to its length; its words are the block's first ones)."""
    sent: set[int] = set()
    shared = []
    for line in lines:
        shared.append(next((k for k, h in enumerate(line.hash_ids) if h not in sent), len(line.hash_ids)))
        sent.update(line.hash_ids[: line.input_tokens // line.block_tokens - 1])  # the template takes a few tokens
    return shared


def test_a_bailian_sample_is_replayed_line_for_line_and_its_blocks_reach_the_cache(simulator, run_locust, tmp_path):
    """Every line is one row of exactly its lengths; without --trace-block-size its prompts are made of 16-token
    blocks, so the server's prefix cache finds in each request no more than the trace's own shared prefix (and the
    template's few tokens), and over the run most of it."""
    sim = simulator("--block-size", "16", "--enable-prompt-tokens-details")
    out = tmp_path / "bailian"
    proc = run_locust(
        *("-f", "locustfiles/chat.py", "-H", sim.url, "-u", "12", "-r", "12", "-t", "15s"),
        *("--trace", str(BAILIAN), "--speedup", "8", "--results-dir", str(out), *NO_CANARIES, *ARGS),
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = read_trace(str(BAILIAN))
    rows = sorted(read_rows(out / "requests.csv"), key=lambda row: float(row["start_time"]))
    assert len(rows) == len(lines) and all(row["ok"] == "1" and row["count_mismatch"] == "0" for row in rows)
    assert sorted(int(row["target_prompt_tokens"]) for row in rows) == sorted(line.input_tokens for line in lines)
    by_length: dict[int, list[int]] = {}  # each length's shared prefix tokens, in trace order
    for line, blocks in zip(lines, shared_prefix_blocks(lines), strict=True):
        by_length.setdefault(line.input_tokens, []).append(16 * blocks)
    pairs = [(int(row["cached_tokens"]), by_length[int(row["target_prompt_tokens"])].pop(0)) for row in rows]
    print(f"cached {sum(c for c, _ in pairs)} of {sum(s for _, s in pairs)} shared prompt tokens; per row {pairs}")
    assert all(found <= recorded + 16 for found, recorded in pairs)
    assert sum(found for found, _ in pairs) >= 0.7 * sum(recorded for _, recorded in pairs)
