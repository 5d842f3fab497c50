"""The simulator under concurrent load on a real socket: queueing past max_num_seqs, preemptions with a small KV cache,
aborts on client disconnect, process start/stop. Every load is bounded in requests and time."""

import asyncio
import http.client
import json
import signal
import socket
import time

import aiohttp
import pytest

from benchmarks.harness import metric_samples
from vllm_stress.simulator.api.requestlog import REQUEST_ID_HEADER, read_request_log
from vllm_stress.simulator.process import SimulatorStartError

NO_LABELS = frozenset()


async def stream_completion(session: aiohttp.ClientSession, url: str, max_tokens: int, prompt: str = "Hi") -> int:
    """One streamed completion with ignore_eos; returns the completion tokens of its usage chunk."""
    body = {
        "prompt": prompt,
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    async with session.post(f"{url}/v1/completions", json=body) as response:
        assert response.status == 200
        data = await response.read()
    usage = [json.loads(line[6:]) for line in data.decode().split("\n\n") if line.startswith('data: {"id"')][-1]
    return usage["usage"]["completion_tokens"]


async def burst(url: str, concurrency: int, max_tokens: int, prompt: str = "Hi", probe=None) -> list[int]:
    """``concurrency`` streams at once; ``probe`` (a coroutine function) runs while they are in flight."""
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
        tasks = [asyncio.create_task(stream_completion(session, url, max_tokens, prompt)) for _ in range(concurrency)]
        probed = await probe() if probe else None
        return await asyncio.gather(*tasks), probed


def test_burst_beyond_max_num_seqs_queues_requests(simulator):
    with simulator("--max-num-seqs", "4") as sim:

        async def probe():
            await asyncio.sleep(0.2)
            return metric_samples(sim.url)

        tokens, during = asyncio.run(burst(sim.url, 16, 100, probe=probe))
        assert tokens == [100] * 16
        assert during["vllm:num_requests_running", NO_LABELS] == 4
        assert during["vllm:num_requests_waiting", NO_LABELS] > 0
        after = metric_samples(sim.url)
        assert after["vllm:num_requests_waiting", NO_LABELS] == 0
        assert after["vllm:request_success_total", frozenset({("finished_reason", "length")})] == 16
        assert after["vllm:generation_tokens_total", NO_LABELS] == 1600
        assert after["vllm:request_queue_time_seconds_count", NO_LABELS] == 16
        assert after["vllm:request_queue_time_seconds_sum", NO_LABELS] > 0.2


def test_small_kv_cache_preempts(simulator):
    with simulator("--max-model-len", "512", "--num-gpu-blocks-override", "40", "--time-scale", "4") as sim:
        prompt = " ".join(["word"] * 100)
        tokens, _ = asyncio.run(burst(sim.url, 8, 300, prompt))
        assert tokens == [300] * 8
        samples = metric_samples(sim.url)
        assert samples["vllm:num_preemptions_total", NO_LABELS] > 0
        assert samples["vllm:kv_cache_usage_perc", NO_LABELS] == 0


def test_client_disconnect_aborts_request(simulator, tmp_path):
    """A client that leaves after its first event: the engine aborts the request at once (its request log says so, its
    3,000 tokens cut to a few) and frees its slot; as in vLLM 0.32 no finished-request metric counts the abort."""
    log = tmp_path / "requests.jsonl"
    with simulator("--request-log", str(log)) as sim:

        async def leave_early():
            body = {"prompt": "Hi", "max_tokens": 3000, "ignore_eos": True, "stream": True}
            headers = {REQUEST_ID_HEADER: "leaves-early"}  # the simulator logs the requests that carry an id
            async with (
                aiohttp.ClientSession() as session,
                session.post(f"{sim.url}/v1/completions", json=body, headers=headers) as response,
            ):
                await response.content.readuntil(b"\n\n")

        asyncio.run(leave_early())
        deadline = time.monotonic() + 10
        while metric_samples(sim.url)["vllm:num_requests_running", NO_LABELS] > 0:
            assert time.monotonic() < deadline, "the aborted request still runs"
            time.sleep(0.05)
        samples = metric_samples(sim.url)
    finished = {key[1]: value for key, value in samples.items() if key[0] == "vllm:request_success_total"}
    assert sum(finished.values()) == 0 and finished[frozenset({("finished_reason", "abort")})] == 0
    (record,) = read_request_log(str(log)).values()
    assert record["finish_reason"] == "abort" and record["completion_tokens"] < 3000
    assert samples["vllm:generation_tokens_total", NO_LABELS] == record["completion_tokens"]


def test_a_client_that_stops_reading_still_gets_every_chunk_in_order(simulator):
    """A reader that stalls while the server generates: the writes pile up in the connection's buffers (7.5 MB, more
    than the kernel's largest send buffer here, 4 MB: past the simulator's write-buffer limit its per-token writes
    leave it to the handler, which waits for the buffer to drain); once it reads, the HTTP chunked framing and every
    SSE event of all choices are whole and in order."""
    with simulator("--profile", "cpu-tiny", "--time-scale", "100") as sim:
        host, port = sim.url.removeprefix("http://").split(":")
        connection = http.client.HTTPConnection(host, int(port), timeout=60)
        connection.sock = socket.socket()
        connection.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a small window: the server must wait
        connection.sock.connect((host, int(port)))
        body = {
            "prompt": "Hi",
            "max_tokens": 3000,
            "n": 8,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        connection.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
        response = connection.getresponse()  # the headers come with the first chunk
        time.sleep(1.0)
        events = [event.removeprefix("data: ") for event in response.read().decode().split("\n\n") if event]
        connection.close()
        assert events.pop() == "[DONE]"
        chunks = [json.loads(event) for event in events]
        assert chunks.pop()["usage"]["completion_tokens"] == 24000
        for index in range(8):
            choice = [chunk["choices"][0] for chunk in chunks if chunk["choices"][0]["index"] == index]
            assert len(choice) == 3000 and [c["finish_reason"] for c in choice[-2:]] == [None, "length"]


def test_sigterm_stops_cleanly_and_start_errors_are_reported(simulator):
    sim = simulator("--profile", "h100-llama-3.1-8b")
    assert sim.model == "meta-llama/Llama-3.1-8B-Instruct" and sim.profile == "h100-llama-3.1-8b"
    sim.proc.send_signal(signal.SIGTERM)
    assert sim.proc.wait(timeout=10) == 0
    with pytest.raises(SimulatorStartError, match="unknown profile 'no-such-profile'"):
        simulator("--profile", "no-such-profile")
