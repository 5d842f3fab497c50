"""Unit tests of what a run checks before it starts (``vllm_stress/client/checks.py``) and of how failures are named
(``vllm_stress/core/failures.py``, for the Locust users and the parallel-query runner's aiohttp errors; the SDK user's own
mapping of the openai errors in front of it is run in tests/test_faults.py). Nothing here imports Locust, whose
import monkey-patches the test process."""

from __future__ import annotations

import errno
import ssl

import gevent
import pytest
from geventhttpclient.response import HTTPParseError

from tests.helpers import parsed_options
from vllm_stress.client.checks import StopTarget, check_model, validate
from vllm_stress.core.failures import StreamError, failure_name


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--input-tokens", "0"], "--input-tokens must be at least 1, got 0"),
        (["--output-tokens", "-3"], "--output-tokens must be at least 1, got -3"),
        (["--request-timeout", "-1"], "--request-timeout must be more than 0 seconds, got -1"),
        (
            ["--input-tokens", "100", "--prefix-tokens", "100"],
            "--prefix-tokens must be at least 0 and less than --input-tokens (100), got 100",
        ),
        (["--prefix-groups", "0"], "--prefix-groups must be at least 1, got 0"),
        (["--prefix-hit-rate", "1"], "--prefix-hit-rate must be at least 0 and below 1 (the last token is computed)"),
        (
            ["--prefix-hit-rate", "0.5", "--prefix-tokens", "8"],
            "--prefix-hit-rate builds its own prompts: drop --prefix-",
        ),
        (["--kv-block-size", "0"], "--kv-block-size must be at least 1, got 0"),
        (["--token-spread", "-0.5"], "--token-spread must not be negative, got -0.5"),
        (["--dataset", "/nonexistent.jsonl"], "--dataset: [Errno 2] No such file or directory"),
        (["--num-prompts", "-1"], "--num-prompts must be at least 0 (0: the whole --dataset), got -1"),
        (["--trace", "x.jsonl", "--arrival-rate", "3"], "--trace and --arrival-rate both set when to send: give one"),
        (["--trace", "x.jsonl", "--speedup", "0"], "--speedup must be more than 0, got 0"),
    ],
)
def test_options_no_run_can_use_are_refused_in_one_line(args, message):
    with pytest.raises(StopTarget) as refused:
        validate(parsed_options(*args))
    assert str(refused.value).startswith(message) and "\n" not in str(refused.value)


def test_the_defaults_are_valid():
    validate(parsed_options())


@pytest.mark.parametrize(
    ("args", "served", "message"),
    [
        ([], {"other": 4096}, "model 'm' is not served by http://h (it serves: other)"),
        (
            ["--input-tokens", "4000", "--output-tokens", "200"],
            {"m": 4096},
            "--input-tokens 4000 + --output-tokens 200 = 4200 tokens exceeds m's max_model_len of 4096 at http://h",
        ),
        (
            ["--dataset", "d.jsonl", "--output-tokens", "4096"],
            {"m": 4096},
            "--output-tokens 4096 leaves no room for a prompt in m's max_model_len of 4096",
        ),
    ],
)
def test_the_model_must_be_served_and_fit(args, served, message):
    with pytest.raises(StopTarget, match=message.replace("(", r"\(").replace(")", r"\)").replace("+", r"\+")):
        check_model(parsed_options(*args), "m", served, "http://h")


@pytest.mark.parametrize("served", [{"m": 4096}, {"m": None}, {}])
def test_a_fitting_or_unlisted_model_passes(served):
    check_model(parsed_options("--input-tokens", "2048", "--output-tokens", "512"), "m", served, "http://h")


class Wrapped(Exception):
    """Like geventhttpclient's RetriesExceeded: the real error in ``original``."""

    def __init__(self, original: BaseException) -> None:
        super().__init__("retries exceeded")
        self.original = original


def refused_connector():
    import aiohttp  # here, not at the top: imported before Locust's monkey-patching it would keep unpatched ssl

    return aiohttp.ClientConnectorError(None, ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused"))


@pytest.mark.parametrize(
    ("exc", "name"),
    [
        (StreamError("NoOutput", "no chunk carried output"), "NoOutput"),
        (StreamError("HTTP 503"), "HTTP 503"),
        (gevent.Timeout(1), "Timeout"),
        (TimeoutError(), "Timeout"),
        (ConnectionRefusedError(errno.ECONNREFUSED, "refused"), "ConnectionRefused"),
        (Wrapped(ConnectionRefusedError(errno.ECONNREFUSED, "refused")), "ConnectionRefused"),
        (refused_connector, "ConnectionRefused"),
        (ssl.SSLCertVerificationError("certificate verify failed"), "TLSError"),
        (OSError(errno.EADDRNOTAVAIL, "Cannot assign requested address"), "NoLocalPort"),
        (OSError(errno.EMFILE, "Too many open files"), "TooManyOpenFiles"),
        (ConnectionResetError(errno.ECONNRESET, "reset"), "StreamTruncated"),
        (HTTPParseError("invalid chunk"), "StreamTruncated"),
        (Wrapped(HTTPParseError("invalid chunk")), "StreamTruncated"),
        (ValueError("Expecting value"), "MalformedJSON"),
        (KeyError("choices"), "KeyError"),
    ],
)
def test_every_client_names_a_failure_the_same_way(exc, name):
    assert failure_name(exc() if callable(exc) else exc) == name
