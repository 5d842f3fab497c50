"""The per-request measurement and its row (no server needed)."""

import csv

import pytest

from vllm_stress.client.exchange import Exchange, error_event, response_error
from vllm_stress.core import schema
from vllm_stress.core.failures import StreamError
from vllm_stress.master.runfolder import RunFolder, RunFolderExists


def streamed(gaps, completion_tokens=None, prompt_tokens=None, target_prompt=100, max_tokens=4, check=True):
    ex = Exchange("chat", 10, target_prompt, max_tokens, check_output=check)
    now = ex.start + 0.25  # first output 250 ms after the send
    ex.output(now)
    for gap in gaps:
        now += gap
        ex.output(now)
    ex.usage({"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens})
    ex.finish()
    return ex


def test_metrics_follow_the_vllm_definitions():
    ex = streamed([0.01, 0.02, 0.03], completion_tokens=4, prompt_tokens=100)
    assert ex.ttft == pytest.approx(0.25)
    assert ex.e2e == pytest.approx(0.31)  # the last output chunk, not the usage chunk or [DONE]
    assert ex.tpot == pytest.approx(0.06 / 3)
    assert ex.gaps == pytest.approx([0.01, 0.02, 0.03])
    assert ex.chunks == 4


def test_row_has_every_column_in_order():
    row = dict(
        zip(
            schema.REQUEST_COLUMNS,
            streamed([0.01], completion_tokens=2, prompt_tokens=100, max_tokens=2).row("w1"),
            strict=True,
        )
    )
    assert row["ok"] == 1 and row["error"] == "" and row["worker"] == "w1" and row["users"] == 10
    assert row["count_mismatch"] == 0
    assert row["end_time"] == pytest.approx(row["start_time"] + row["e2e_s"], abs=1e-5)


@pytest.mark.parametrize(
    ("prompt", "completion", "check", "mismatch"),
    [(100, 4, True, 0), (101, 4, True, 1), (100, 3, True, 1), (100, 3, False, 0), (None, 4, True, 0)],
)
def test_count_mismatch_flags_usage_off_target(prompt, completion, check, mismatch):
    ex = streamed([0.01, 0.01, 0.01], completion_tokens=completion, prompt_tokens=prompt, check=check)
    assert ex.row("w")[schema.REQUEST_COLUMNS.index("count_mismatch")] == mismatch


def test_failure_keeps_the_first_error_and_has_no_tpot():
    ex = Exchange("chat", 1, 10, 4, check_output=True)
    ex.fail("HTTP 503")
    ex.fail("Aborted")
    row = dict(zip(schema.REQUEST_COLUMNS, ex.row("w"), strict=True))
    assert row["ok"] == 0 and row["error"] == "HTTP 503" and row["ttft_s"] == "" and row["tpot_s"] == ""


def test_a_stream_without_output_fails_unless_it_primed_a_session():
    """A stream closed by [DONE] whose only token had no text (vLLM sends no event for it) is NoOutput, but for a
    session primer (--session-primer, users/base.send_request), sent for its prefill; a cut stream fails both."""
    request, primer = (Exchange(name, 1, 10, 1, check_output=True) for name in ("chat", schema.SESSION_PRIMER))
    primer.output_needed = False
    with pytest.raises(StreamError, match="no chunk carried output"):
        request.check_stream_end(done=True)
    primer.check_stream_end(done=True)
    primer.usage({"prompt_tokens": 10, "completion_tokens": 1})
    primer.finish()
    row = dict(zip(schema.REQUEST_COLUMNS, primer.row("w"), strict=True))
    assert (row["ok"], row["error"], row["ttft_s"], row["count_mismatch"]) == (1, "", "", 0)
    with pytest.raises(StreamError, match="without data: \\[DONE\\]"):
        primer.check_stream_end(done=False)


def test_error_names_are_stable_and_readable():
    body = b'{"error":{"message":"The model `x` does not exist.","type":"NotFoundError","param":null,"code":404}}'
    err = response_error(404, body)
    assert err.name == "HTTP 404" and "does not exist" in str(err)
    assert response_error(502, b"<html>bad gateway</html>").name == "HTTP 502"
    assert (
        error_event({"error": {"message": "engine died", "type": "InternalServerError"}}).name
        == "StreamError InternalServerError"
    )


def test_latency_buckets():
    assert schema.latency_bucket_ms(0.01234) == 12.3
    assert schema.latency_bucket_ms(0.4567) == 457.0
    assert schema.latency_bucket_ms(2.347) == 2350.0


def test_run_folder_refuses_an_earlier_run(tmp_path):
    folder = RunFolder(str(tmp_path / "r"))
    folder.write_rows([streamed([0.01], completion_tokens=2).row("w")])
    folder.close()
    with pytest.raises(RunFolderExists, match="--overwrite"):
        RunFolder(str(tmp_path / "r"))
    RunFolder(str(tmp_path / "r"), overwrite=True).close()
    with open(tmp_path / "r" / schema.REQUESTS_FILE) as f:
        assert next(csv.reader(f)) == schema.REQUEST_COLUMNS
