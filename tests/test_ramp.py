"""The step ramp end to end: simulator with --max-num-seqs 8, master + 2 workers, levels 4, 8, 16, 32, report."""

import asyncio
import json
import threading

import aiohttp
from aiohttp import web

from benchmarks.harness import read_rows
from vllm_stress.client.stream import KERNEL_ENABLED


def test_ramp_saturates_at_max_num_seqs(scenarios, tmp_path):
    out = tmp_path / "ramp"
    code = scenarios(
        [
            "run",
            "--scenario",
            "smoke",
            "--out",
            str(out),
            "--workers",
            "2",
            "--simulator-arg=--max-num-seqs=8",
            "--locust-arg=--levels=4,8,16,32",
            "--locust-arg=--step-time=5",
            "--locust-arg=--warmup=2",
        ]
    )
    assert code == 0
    rows = read_rows(out / "run-1" / "requests.csv")
    assert {r["users"] for r in rows} == {"4", "8", "16", "32"}  # every row carries its level
    assert len({r["worker"] for r in rows}) == 2
    summary = json.loads((out / "report" / "summary.json").read_text())
    levels = {level["users"]: level for level in summary["levels"]}
    assert sorted(levels) == [4, 8, 16, 32]
    for users, level in levels.items():  # every level got its users: that many requests in flight
        assert level["concurrency_mean"] > 0.9 * users, (users, level["concurrency_mean"])
        assert level["client_cpu_max_percent"] > 0  # the workers' own CPU reports reach client_health.csv
        # and their read-behind times: after the chunks' arrival, within the level's 5 s
        assert not KERNEL_ENABLED or 0 < level["client_read_behind_p99_ms"] < 5000
    # below max_num_seqs the server's batch grows with the users, and throughput with it; on a loaded test machine
    # by less than the users (a 5 s level's few scrapes, the simulator's slower steps: 6.0 running against 4.0 and
    # 1.47x the tokens/s in two clean-clone runs), so by a quarter at least
    running = {users: level["server_running_mean"] for users, level in levels.items()}
    assert running[8] > 1.25 * running[4]
    tok_s = {users: level["output_tokens_per_s"] for users, level in levels.items()}
    assert tok_s[8] > 1.25 * tok_s[4]
    assert abs(tok_s[16] / tok_s[8] - 1) < 0.15 and abs(tok_s[32] / tok_s[8] - 1) < 0.15  # then it stops growing
    ttft = {users: level["ttft_p50_s"] for users, level in levels.items()}
    assert ttft[32] > 2 * ttft[8]  # the extra users wait in the server's queue
    bounds = {users: level["bound"] for users, level in levels.items()}
    # below the cap nothing waits (a loaded test machine may still flag its own client); from 16 users the rest wait,
    # the batch at max_num_seqs 8 when its sampled running mean shows it (tests/test_capacity.py pins that verdict)
    assert all(bounds[users] in ("", "client-bound") or bounds[users].startswith("client-bound (") for users in (4, 8))
    queued = ("batch-bound: max_num_seqs 8 reached (", "server-bound: waiting requests")
    assert bounds[16].startswith(queued) and bounds[32].startswith(queued), bounds
    report = (out / "report" / "report.md").read_text()
    assert f"| Why it saturates there | {bounds[16]} from 16 users |" in report


def test_a_gateway_cap_is_reported_as_client_or_gateway_bound(scenarios, simulator, tmp_path):
    """A gateway that lets 4 requests through at a time: the users wait in it, the server never sees them."""
    sim = simulator("--profile", "cpu-tiny")
    with Gateway(sim.url, limit=4) as gateway:
        out = tmp_path / "capped"
        code = scenarios(
            [
                "run",
                "--scenario",
                "smoke",
                "--target",
                gateway.url,
                "--out",
                str(out),
                "--workers",
                "2",
                "--locust-arg=--levels=4,16",
                "--locust-arg=--step-time=5",
                "--locust-arg=--warmup=2",
            ]
        )
    assert code == 0
    summary = json.loads((out / "report" / "summary.json").read_text())
    levels = {level["users"]: level for level in summary["levels"]}
    assert levels[16]["server_in_system_mean"] <= 4.5  # the gateway's limit, whatever the users
    # a gateway, told from vLLM's frontend only by what sits between: named whether or not the client is cleared
    assert levels[16]["bound"].startswith(("gateway/frontend-bound", "client/gateway-bound"))
    assert "(vLLM's HTTP layer held 4" in levels[16]["bound"]
    assert levels[16]["concurrency_mean"] > 14  # the client had them all in flight: the gap is in between


class Gateway:
    """A loopback reverse proxy that forwards at most ``limit`` chat requests at a time (others wait in it)."""

    def __init__(self, upstream: str, limit: int) -> None:
        self.upstream, self.limit = upstream, limit
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()

    async def forward(self, request: web.Request) -> web.StreamResponse:
        async with self.session.request(
            request.method,
            self.upstream + request.path_qs,
            data=await request.read(),
            headers={"Content-Type": "application/json"},
        ) as upstream:
            response = web.StreamResponse(status=upstream.status, headers={"Content-Type": upstream.content_type})
            await response.prepare(request)
            async for data in upstream.content.iter_any():
                await response.write(data)
            return response

    async def limited(self, request: web.Request) -> web.StreamResponse:
        async with self.semaphore:
            return await self.forward(request)

    async def start(self) -> None:
        self.session = aiohttp.ClientSession()
        self.semaphore = asyncio.Semaphore(self.limit)
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.limited)
        app.router.add_route("*", "/{tail:.*}", self.forward)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"
        self.ready.set()

    def __enter__(self):
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        asyncio.run_coroutine_threadsafe(self.start(), self.loop)
        assert self.ready.wait(10), "the gateway did not start"
        return self

    def __exit__(self, *exc) -> None:
        async def stop():
            await self.runner.cleanup()
            await self.session.close()

        asyncio.run_coroutine_threadsafe(stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
