"""--source-addresses: connections leave from several local addresses in turn, so one host holds more than its
ephemeral port range per server; without them, running out of ports is one ERROR line (client/sourceaddr.py)."""

import collections
import json
import subprocess
import sys

from tests.helpers import LOCUST, NOWHERE, SHORT, read_rows, refused
from vllm_stress.client.sourceaddr import SourceAddresses

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

    # the two-address run first: its checks before the users start (GET /v1/models, /tokenize) use the default
    # address, whose ports a run that exhausted them keeps in TIME_WAIT for a minute
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
