"""The audio user against the simulator's /v1/audio/transcriptions and /v1/audio/translations, through the real
locust CLI: every row a request the server logged, with the server's token counts, its TTFT and the audio sent; the
report's audio table from those rows; the WAV, the form and the options on their own."""

from __future__ import annotations

import argparse
import io
import wave

import pytest

from tests.helpers import analyse, check_first_token_times, logged_run
from vllm_stress.analysis.io.load import load_run
from vllm_stress.analysis.levels import level_windows
from vllm_stress.client.audio import SAMPLE_RATE, wav_bytes
from vllm_stress.client.features.audio import audio_seconds
from vllm_stress.core.csvrows import read_rows
from vllm_stress.core.metrics import in_window
from vllm_stress.simulator.api import audioapi
from vllm_stress.simulator.model.errors import ApiError

SECONDS = 2.0  # audio per request: 64 kB of WAV, a transcript of 8 tokens (audioapi.transcript_tokens)
RUNS = {  # the run's options -> its rows' name and path, and whether they stream
    "streamed transcription": (["--audio-task", "transcription"], "transcription", "/v1/audio/transcriptions", True),
    "whole translation": (
        ["--audio-task", "translation", "--no-stream"],
        "translation",
        "/v1/audio/translations",
        False,
    ),
}


def run_audio(run_locust, simulator, tmp_path, *args: str) -> tuple[list[dict], dict[str, dict]]:
    """Two audio users for 4 s against a simulator with a request log: (the rows, the log by request id)."""
    audio = ("-f", "locustfiles/audio.py", "--audio-seconds", str(SECONDS))
    return logged_run(run_locust, simulator, tmp_path, *audio, *args)


@pytest.mark.parametrize("run", RUNS)
def test_rows_are_the_servers_requests_with_their_audio(run_locust, simulator, tmp_path, run):
    """Each finished row: its path the logged one, its audio what was sent, its tokens the server's usage (a whole
    translation's answer has none: empty), streamed with the server's first write as its TTFT and TPOT as chat's;
    the report's audio seconds per second are the rows' that ended in the level's window."""
    args, name, path, streamed = RUNS[run]
    rows, records = run_audio(run_locust, simulator, tmp_path, *args)
    done = [row for row in rows if row["error"] != "Aborted"]
    assert done and {row["name"] for row in done} == {name}
    for row in done:
        record = records[row["request_id"]]
        assert (row["ok"], row["count_mismatch"], row["endpoint"]) == ("1", "0", path), row
        assert record["path"] == path and float(row["audio_s"]) == SECONDS, (row, record)
        assert record["completion_tokens"] == audioapi.transcript_tokens(SECONDS), record
        if streamed:
            assert int(row["prompt_tokens"]) == record["prompt_tokens"] == len(audioapi.DECODER_PROMPT), row
            assert int(row["completion_tokens"]) == record["completion_tokens"], (row, record)
            gaps = float(row["e2e_s"]) - float(row["ttft_s"])
            assert float(row["tpot_s"]) * (int(row["completion_tokens"]) - 1) == pytest.approx(gaps, abs=1e-5), row
        else:
            assert (row["ttft_s"], row["chunks"], row["prompt_tokens"], row["completion_tokens"]) == ("", "0", "", "")
    if streamed:
        # a row's send time is when its request's last bytes left, the server's arrival when its first came: 64 KB
        # of audio apart, which a loaded machine stretches past chat's 2 ms (seen: 3 ms under the suite's full load)
        check_first_token_times(done, records, send_s=0.02)
    check_report(tmp_path / "run", tmp_path / "report")


def check_report(run_folder, report_folder) -> None:
    """The level's audio figures from the measured rows that ended in its window, and the report's section."""
    summary = analyse(run_folder, report_folder)
    (level,) = summary["levels"]
    windows, _ = level_windows(load_run(run_folder))
    start, end = windows.iloc[0]["start"], windows.iloc[0]["end"]
    ended = [
        row
        for row in read_rows(run_folder / "requests.csv")
        if row["ok"] == "1" and in_window(float(row["end_time"]), start, end)
    ]
    assert level["audio_requests_per_s"] == pytest.approx(len(ended) / (end - start))
    assert level["audio_s_per_s"] == pytest.approx(SECONDS * len(ended) / (end - start))
    assert "## Audio: transcription and translation:" in (report_folder / "report.md").read_text()


@pytest.mark.parametrize("seconds", [0.5, SECONDS, 30.0])
def test_the_wav_holds_the_audio_asked(seconds):
    """16 kHz mono 16-bit PCM of the length asked, read back with the standard library; the same bytes every time,
    not silence; the simulator reads the same length from it."""
    data = wav_bytes(seconds)
    with wave.open(io.BytesIO(data)) as wav:
        assert (wav.getnchannels(), wav.getsampwidth(), wav.getframerate()) == (1, 2, SAMPLE_RATE)
        assert wav.getnframes() / wav.getframerate() == seconds
        assert len(set(wav.readframes(100))) > 2
    assert wav_bytes(seconds) == data
    assert audioapi.audio_seconds(data) == seconds


def test_the_audio_options_refuse_what_vllm_would():
    """Above 0, and no longer than vLLM's 25 MB file limit holds: each refusal one line."""
    assert audio_seconds("2.5") == 2.5
    for text in ("0", "-1", "900"):
        with pytest.raises(argparse.ArgumentTypeError) as refused:
            audio_seconds(text)
        assert "\n" not in str(refused.value) and "25 MB" in str(refused.value)


@pytest.mark.parametrize(
    "form",
    [{"stream_include_usage": "true"}, {"stream": "maybe"}, {"response_format": "srt"}, {"max_completion_tokens": "0"}],
)
def test_the_simulator_refuses_a_bad_form(form):
    """Stream options without a stream (vLLM's own refusal), a boolean it cannot read, a format it does not serve,
    an output limit below 1: 400."""
    with pytest.raises(ApiError) as refused:
        audioapi.generation(form)
    assert refused.value.status == 400


def test_the_simulator_refuses_what_is_not_wav():
    with pytest.raises(ApiError, match="Invalid or unsupported audio file"):
        audioapi.audio_seconds(b"RIFF" + bytes(40))
