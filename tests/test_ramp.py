"""The step ramp end to end: simulator with --max-num-seqs 8, master + 2 workers, levels 4, 8, 16, 32, report."""

import json

from scenarios.__main__ import main
from tests.conftest import read_rows


def test_ramp_saturates_at_max_num_seqs(tmp_path):
    out = tmp_path / "ramp"
    code = main(["run", "--scenario", "smoke", "--out", str(out), "--workers", "2",
                 "--simulator-arg=--max-num-seqs=8", "--locust-arg=--levels=4,8,16,32", "--locust-arg=--step-time=5",
                 "--locust-arg=--warmup=2"])
    assert code == 0
    rows = read_rows(out / "run-1" / "requests.csv")
    assert {r["users"] for r in rows} == {"4", "8", "16", "32"}  # every row carries its level
    assert len({r["worker"] for r in rows}) == 2
    summary = json.loads((out / "report" / "summary.json").read_text())
    levels = {level["users"]: level for level in summary["levels"]}
    assert sorted(levels) == [4, 8, 16, 32]
    for users, level in levels.items():  # every level got its users: that many requests in flight
        assert level["concurrency_mean"] > 0.9 * users, (users, level["concurrency_mean"])
    tok_s = {users: level["output_tokens_per_s"] for users, level in levels.items()}
    assert tok_s[8] > 1.5 * tok_s[4]  # below max_num_seqs more users means more throughput
    assert abs(tok_s[16] / tok_s[8] - 1) < 0.15 and abs(tok_s[32] / tok_s[8] - 1) < 0.15  # then it stops growing
    ttft = {users: level["ttft_p50_s"] for users, level in levels.items()}
    assert ttft[32] > 2 * ttft[8]  # the extra users wait in the server's queue
