"""--source-addresses: connections leave from several local addresses in turn, so one host holds more than its
ephemeral port range per server; without them, running out of ports is one ERROR line (client/sourceaddr.py)."""

import collections
import http.server
import json
import subprocess
import sys
import threading

from tests.helpers import LOCUST, NOWHERE, SHORT, read_rows, refused
from vllm_stress.client import prompts
from vllm_stress.client.sourceaddr import SourceAddresses
from vllm_stress.core import served

PORTS = "40000 40029"  # 30 ephemeral ports in the load host's namespace
USERS = "40"  # more connections than one source address has ports, fewer than two have


def test_an_address_that_is_not_this_hosts_is_refused():
    sources = SourceAddresses()
    try:
        sources.use("127.0.0.2,192.0.2.1")  # TEST-NET-1 (RFC 5737): never a local address
    except ValueError as e:
        assert str(e) == "192.0.2.1: Cannot assign requested address (not an address of this host)"
    else:
        raise AssertionError("192.0.2.1 was taken")
    assert sources.addresses == []


class PeerServer(http.server.BaseHTTPRequestHandler):
    """Answers /v1/models and /tokenize as vLLM does, and notes the address each request came from."""

    peers: list[tuple[str, str]] = []

    def do_GET(self) -> None:
        self.answer({"data": [{"id": "m", "max_model_len": 128}]})

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        self.answer({"count": 7})

    def answer(self, body: dict) -> None:
        self.peers.append((self.path, self.client_address[0]))
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *_args: object) -> None:
        pass


def test_the_checks_before_the_users_start_leave_from_the_source_addresses(monkeypatch):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), PeerServer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    sources = SourceAddresses()
    monkeypatch.setattr(prompts, "SOURCES", sources)
    try:
        assert served.models(url, {}, timeout=10, session=sources.http_session()) == {"m": 128}  # the default
        sources.use("127.0.0.2,127.0.0.3")
        assert served.models(url, {}, timeout=10, session=sources.http_session()) == {"m": 128}
        assert prompts.Tokenizer(url, "m", {}, chat=False).count("hello") == 7
    finally:
        server.shutdown()
    assert PeerServer.peers == [("/v1/models", "127.0.0.1"), ("/v1/models", "127.0.0.2"), ("/tokenize", "127.0.0.3")]


def test_two_source_addresses_hold_a_level_one_cannot(network, tmp_path):
    host = network.add_host("load")
    subprocess.run(
        ["ip", "netns", "exec", host.netns, "sysctl", "-q", "-w", f"net.ipv4.ip_local_port_range={PORTS}"], check=True
    )
    request_log = tmp_path / "requests.jsonl"
    simulator = host.start(
        [sys.executable, "-m", "vllm_stress.simulator", "--port", "8000", "--profile", "cpu-tiny"]
        + ["--set", "t_fixed=0.05", "--request-log", str(request_log)]
    )
    simulator.wait_for("simulator ready", timeout=60)
    locust = [*LOCUST, "-f", "locustfiles/chat.py", "-H", "http://127.0.0.1:8000", *SHORT, "-u", USERS, "-r", USERS]

    # the two-address run first: a run that exhausted the default address's ports keeps them in TIME_WAIT for a
    # minute
    two = host.start(
        [*locust, "-t", "4", "--results-dir", str(tmp_path / "two"), "--source-addresses", "127.0.0.2,127.0.0.3"]
    )
    assert two.wait(timeout=120) == 0, two.output
    assert not [line for line in two.lines if "/ERROR/" in line]
    rows = read_rows(tmp_path / "two" / "requests.csv")
    assert {row["error"] for row in rows} <= {"", "Aborted"}  # the streams open when the run stopped
    one = host.start([*locust, "-t", "4", "--results-dir", str(tmp_path / "one")])
    assert one.wait(timeout=120) == 1, one.output  # requests failed
    errors = [line for line in one.lines if "/ERROR/" in line]
    assert len(errors) == 1 and errors[0].endswith(
        "no local port left to connect to 127.0.0.1:8000: about 30 ports (40000-40029, "
        "net.ipv4.ip_local_port_range) per source address, from the one the kernel picks; add addresses with "
        "--source-addresses, or workers on other hosts"
    ), errors
    assert {row["error"] for row in read_rows(tmp_path / "one" / "requests.csv")} >= {"NoLocalPort"}

    simulator.stop()  # its request log is complete once it has stopped
    peers = collections.Counter(json.loads(line)["peer"] for line in request_log.read_text().splitlines())
    assert peers["127.0.0.2"] > 0 and peers["127.0.0.3"] > 0, peers


def test_the_sdk_user_is_refused_source_addresses(run_locust):
    """The SDK user's connections are the openai client's: the addresses would be ignored, so the run is refused
    at its start (before the server is contacted)."""
    proc = run_locust(
        "-f", "locustfiles/sdk.py", "-H", NOWHERE, *SHORT, "-u", "1", "-t", "5", "--source-addresses", "127.0.0.2"
    )
    refused(proc, "--source-addresses applies to an http:// target and the users whose connections are the suite's")
