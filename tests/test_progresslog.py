"""The console's lines about a run: its progress, and how it closed."""

from __future__ import annotations

from collections import Counter

from vllm_stress.master.progresslog import closing_line, progress_line

TOTALS = Counter({"requests": 120, "failures": 3, "aborted": 2, "mismatches": 1})


def test_progress_line_says_the_level_the_throughput_and_the_counts():
    line = progress_line(16, 1234.6, TOTALS)
    assert line == "level 16 users | output 1235 tok/s | 120 requests, 3 failed, 2 aborted"


def test_closing_line_names_the_requests_served_without_a_row():
    lost = [{"worker": "w1", "last_seen": None, "rows": 5}, {"worker": "w2", "last_seen": 1.0, "rows": 7}]
    line = closing_line("results/run", TOTALS, 0, [])
    assert line == (
        "results/run: 120 requests, 3 failed, 1 with token counts off target; 2 streams aborted when the run stopped "
        "(not failures)"
    )
    assert closing_line("r", TOTALS, None, lost).endswith("(not failures)")  # the server's count is not known
    with_canaries = closing_line("r", TOTALS + Counter(canaries=5), None, lost)
    assert with_canaries.startswith("r: 120 requests (of which 5 correctness canaries), 3 failed")
    both = closing_line("r", TOTALS + Counter(canaries=5, primers=2), None, lost)
    assert both.startswith("r: 120 requests (of which 5 correctness canaries, 2 session primers), 3 failed")
    assert closing_line("r", TOTALS + Counter(primers=2), None, []).startswith("r: 120 requests (of which 2 session")
    assert closing_line("r", TOTALS, 4, lost).endswith("; 4 more served by the server and lost with worker(s) w1, w2")
    assert closing_line("r", TOTALS, 4, []).endswith("(no worker lost: another client of the server?)")
