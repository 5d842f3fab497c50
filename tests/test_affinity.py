"""Client-side spreading over the replicas --host names, the session-affinity header of each router preset, a
headless Service name standing for its pods, and router-overhead's input check."""

import pytest

from benchmarks.harness import read_rows
from tests.helpers import NO_CANARIES
from vllm_stress.client.affinity import PRESETS, Spread, affinity_header, echoes_cookie
from vllm_stress.core import schema
from vllm_stress.core.fleet import replica_name, replica_urls
from vllm_stress.master.servermetrics import service_replicas
from vllm_stress.scenarios.cli import main as scenarios_main

REPLICAS = ["http://a:8000", "http://b:8000", "http://c:8000"]


def test_a_host_names_its_replicas_comma_separated():
    assert replica_urls("http://a:8000/, http://b:8000,http://c:8000") == REPLICAS
    assert replica_urls("http://a:8000") == ["http://a:8000"]
    assert replica_urls("http://a:8000/cycle/ok,http503") == ["http://a:8000/cycle/ok,http503"]  # a comma in a path
    assert [replica_name(url) for url in REPLICAS] == ["a:8000", "b:8000", "c:8000"]


def test_round_robin_deals_every_users_requests_in_turn():
    first, second = Spread(REPLICAS, sticky=False), Spread(REPLICAS, sticky=False)
    sent = [user.next() for _ in range(4) for user in (first, second)]
    counts = [sent.count(url) for url in REPLICAS]
    assert sum(counts) == 8 and max(counts) - min(counts) == 1  # the process's requests, in turn over the three
    assert all(sent[i] != sent[i + 1] for i in range(len(sent) - 1))  # consecutive requests, different replicas


def test_sticky_users_keep_one_replica_each_and_are_dealt_out():
    users = [Spread(REPLICAS, sticky=True) for _ in range(3)]
    assert all(len({user.next() for _ in range(5)}) == 1 for user in users)
    assert {user.next() for user in users} == set(REPLICAS)


@pytest.mark.parametrize(
    ("preset", "header", "cookie"),
    [
        ("", "X-Session-Id", False),
        ("production-stack", "x-user-id", False),
        ("llm-d", "", True),
        ("dynamo", "x-dynamo-session-id", False),
        ("sglang", "X-SMG-Routing-Key", False),
    ],
)
def test_each_router_preset_names_what_that_router_reads(preset, header, cookie):
    assert affinity_header("X-Session-Id", preset) == header
    assert echoes_cookie(preset) is cookie
    assert preset == "" or preset in PRESETS


def test_a_headless_service_name_stands_for_each_address_it_resolves_to():
    assert "http://127.0.0.1:8000/metrics" in service_replicas("http://localhost:8000/metrics")
    assert service_replicas("http://name.invalid:8000/metrics") == service_replicas("") == []


def test_router_overhead_refuses_a_replica_list_naming_none(capsys):
    assert scenarios_main(["router-overhead", "--router", "http://127.0.0.1:9", "--replicas", " , "]) == 2
    assert "--replicas names no URL" in capsys.readouterr().err


# what each router reads, from its own source (vllm_stress/client/affinity.py names them): a header carrying the
# session id, or (llm-d) the cookie it sets on a conversation's first response
ROUTERS = {
    "production-stack": "x-user-id",
    "dynamo": "x-dynamo-session-id",
    "sglang": "X-SMG-Routing-Key",
    "llm-d": "",
}
SESSION_HEADERS = ["X-Session-Id", *filter(None, ROUTERS.values())]


@pytest.mark.product_free
def test_every_preset_is_tested_end_to_end():
    assert set(ROUTERS) == set(PRESETS)


@pytest.mark.parametrize("preset", sorted(ROUTERS))
def test_a_router_preset_pins_each_conversation_as_that_router_reads_it(run_locust, fault_server, tmp_path, preset):
    """Session users (2 turns a conversation, several conversations each) through a server that records every
    request's headers and, on the llm-d path, sets an llm-d-session cookie on each response to a request without
    one: a header preset sends its header with the row's session id, and no other session header; llm-d sends no
    header, sends back the cookie of its conversation's first response on every later turn, and starts each new
    conversation without it."""
    prefix = f"/{preset}"
    out = tmp_path / "run"
    proc = run_locust(
        "-f",
        "locustfiles/session.py",
        "-H",
        fault_server.url + prefix,
        *("-u", "2", "-r", "2", "-t", "3s", "--stop-timeout", "10", "--router-preset", preset),
        *("--input-tokens", "20", "--output-tokens", "4", "--turns", "2", "--turn-tokens", "5", "--think-time", "0"),
        *("--results-dir", str(out), "--headless", "--only-summary", "-L", "WARNING", *NO_CANARIES),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = {row["request_id"]: row for row in read_rows(out / schema.REQUESTS_FILE)}
    sent = fault_server.headers[prefix]
    pinned = dict(zip((headers["X-Request-Id"] for headers in sent), fault_server.pinned[prefix], strict=True))
    conversations = {}
    for headers in sent:
        row = rows[headers["X-Request-Id"]]
        conversation = conversations.setdefault(row["session_id"], [])
        conversation.append((row["turn"], headers))
        header = ROUTERS[preset]
        assert [name for name in SESSION_HEADERS if name in headers] == ([header] if header else [])
        assert not header or headers[header] == row["session_id"]
        cookie = headers.get("Cookie", "")
        if preset == "llm-d" and row["turn"] == "1":
            assert cookie == ""  # a new conversation: the previous one's pod is forgotten
        elif preset == "llm-d":
            first = next(h for turn, h in conversation if turn == "1")
            assert cookie == f"llm-d-session={pinned[first['X-Request-Id']]}"
        else:
            assert cookie == ""
    users = {session.rsplit("-", 1)[0] for session in conversations}
    assert len(users) == 2 and len(conversations) >= 4  # both users went on to new conversations
    assert all([turn for turn, _ in turns][:2] == ["1", "2"][: len(turns)] for turns in conversations.values())
