"""The peak and saturation point per endpoint (vllm_stress.analysis.features.endpoints) on a synthetic run whose
endpoints saturate at different levels: each closed loop's rate is known exactly (every hold a whole number of its
requests' e2e), so the answers below are worked out by hand from the constructed rates."""

from __future__ import annotations

import pandas as pd
import pytest

from vllm_stress.analysis.io.synthetic import closed_loop_rows, step_levels, write_run
from vllm_stress.analysis.report.pipeline import analyse

HOLD_S = 124.0  # a whole number of every e2e below: 62 x 2 s, 32 x 3.875 s, 124 x 1 s, 64 x 1.9375 s, 31 x 4 s
LEVELS = step_levels([2, 4, 8], hold_s=HOLD_S)
CHAT, EMBED, AUDIO = "/v1/chat/completions", "/v1/embeddings", "/v1/audio/transcriptions"
OUTPUT_TOKENS, INPUTS, AUDIO_S = 100, 4, 10.0
# e2e per level; a closed loop of u users finishes u / e2e requests per second
E2E = {
    CHAT: {2: 2.0, 4: 2.0, 8: 3.875},  # x 100 tokens: 100, 200, 206.45 output tok/s
    EMBED: {2: 1.0, 4: 1.9375, 8: 4.0},  # x 4 inputs: 8, 8.258, 8 inputs/s
    AUDIO: {2: 4.0, 4: 4.0, 8: 4.0},  # x 10 s of audio: 5, 10, 20 audio s/s
}
EXPECTED = [  # by endpoint name; peak: the best level; saturation: the smallest level at >= 95 % of the peak
    {"endpoint": AUDIO, "unit": "audio s/s", "peak_users": 8, "peak": 20.0, "saturation_users": 8},  # 10 < 19
    {"endpoint": CHAT, "unit": "output tok/s", "peak_users": 8, "peak": 8 * 100 / 3.875, "saturation_users": 4},
    {"endpoint": EMBED, "unit": "inputs/s", "peak_users": 4, "peak": 4 * 4 / 1.9375, "saturation_users": 2},
]  # chat: 200 >= 0.95 x 206.45 = 196.1 > 100; embeddings: 8 >= 0.95 x 8.258 = 7.845


def endpoint_rows(endpoint: str, e2e: dict[int, float]) -> pd.DataFrame:
    """The endpoint's closed loops, one per level (``e2e``: its requests' e2e by level), through ramp and hold."""
    output = 0 if endpoint == EMBED else OUTPUT_TOKENS
    parts = [
        closed_loop_rows(users, ramp_start, hold_end, e2e[users], completion_tokens=output)
        for users, ramp_start, _, hold_end in LEVELS
    ]
    rows = pd.concat(parts, ignore_index=True).assign(endpoint=endpoint)
    if endpoint == EMBED:
        rows = rows.assign(inputs=INPUTS, name="embeddings")
    return rows.assign(audio_s=AUDIO_S, name="transcription") if endpoint == AUDIO else rows


def mixed_run(folder, e2e: dict[str, dict[int, float]]):
    """A run of the endpoints of ``e2e`` side by side."""
    rows = pd.concat([endpoint_rows(endpoint, by_level) for endpoint, by_level in e2e.items()])
    return write_run(folder, rows.sort_values("end_time", kind="stable"), LEVELS, meta={"model": "m", "complete": True})


def test_each_endpoint_has_its_own_peak_and_saturation_point(tmp_path):
    summary = analyse([mixed_run(tmp_path / "run", E2E)], tmp_path / "out", labels="cfg", db="")
    found = summary["endpoints"]
    assert [entry["endpoint"] for entry in found] == [entry["endpoint"] for entry in EXPECTED]
    for entry, expected in zip(found, EXPECTED, strict=True):
        assert entry == {**expected, "peak": pytest.approx(expected["peak"])}
    assert (summary["peak"]["users"], summary["saturation_users"]) == (8, 8)  # the whole run's: chat's and audio's
    report = (tmp_path / "out" / "report.md").read_text()
    section = report.split("## Peak and saturation per endpoint: cfg")[1].split("\n## ")[0]
    assert "| endpoint | unit | peak at (users) | peak | saturation at (users) |" in section
    assert f"| {AUDIO} | audio s/s | 8 | 20.0 | 8 |" in section
    assert f"| {CHAT} | output tok/s | 8 | 206.5 | 4 |" in section
    assert f"| {EMBED} | inputs/s | 4 | 8.3 | 2 |" in section
    assert (
        f"cfg per endpoint: {AUDIO} peaks at 20.0 audio s/s at 8 users and saturates at 8; {CHAT} peaks at 206.5 "
        f"output tok/s at 8 users and saturates at 4; {EMBED} peaks at 8.3 inputs/s at 4 users and saturates at 2."
    ) in report


def test_a_single_endpoint_run_adds_nothing(tmp_path):
    """With one endpoint the run's own peak and saturation point are the endpoint's."""
    single = analyse([mixed_run(tmp_path / "chat", {CHAT: E2E[CHAT]})], tmp_path / "out", labels="cfg", db="")
    assert single["endpoints"] == []
    assert "per endpoint" not in (tmp_path / "out" / "report.md").read_text()


def test_repeats_average_each_endpoints_levels(tmp_path):
    """Two repeats, the second's embeddings at 4 users slower (e2e 4 s: 4 inputs/s): the mean there is
    (8.258 + 4) / 2 = 6.13, under the 8 inputs/s at 2 and 8 users: the peak is 2 users' (the smallest on ties)."""
    first = mixed_run(tmp_path / "a", {CHAT: E2E[CHAT], EMBED: E2E[EMBED]})
    second = mixed_run(tmp_path / "b", {CHAT: E2E[CHAT], EMBED: {**E2E[EMBED], 4: 4.0}})
    summary = analyse([first, second], tmp_path / "out", labels="cfg", db="")
    embed = {entry["endpoint"]: entry for entry in summary["endpoints"]}[EMBED]
    assert (embed["peak_users"], embed["peak"], embed["saturation_users"]) == (2, pytest.approx(8.0), 2)
