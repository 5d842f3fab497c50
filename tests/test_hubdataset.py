"""``--dataset hf:ORG/NAME``: a Hugging Face Hub dataset's files, downloaded with huggingface_hub from a fake Hub on
127.0.0.1 (HF_ENDPOINT; the machine reaches no huggingface.co) into a cache of the test's own (HF_HOME), then read as
the local files are: the same records, downloaded once, the files the id picks, one-line errors that never hold the
token, and a Locust run whose prompts are the dataset's."""

from __future__ import annotations

import argparse
import json
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import unquote, urlsplit

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import requests

from tests.helpers import NO_CANARIES, NOWHERE, REPO, refused
from vllm_stress.client import hubdataset
from vllm_stress.client.checks import StopTarget, validate
from vllm_stress.client.hubdataset import HubDatasetError, is_hub_id, local_paths, parse, pick
from vllm_stress.client.options import add_arguments
from vllm_stress.client.prompts import load_dataset
from vllm_stress.client.sharegpt import read_conversations
from vllm_stress.core.csvrows import read_rows

COMMIT = "0123456789abcdef0123456789abcdef01234567"  # the fake Hub's one commit, of every revision
TOKEN = "hf_fakeTokenThatMustNeverBeShown"
TRAIN = [f"{' '.join(['tell me about the sea'] * n)} please" for n in (1, 2, 4, 7)]  # 6, 11, 21, 36 words
TEST = ["a held-out question " * 12]  # the test split: never picked when the train split is there
LINES = [{"prompt": "first file, first line"}, {"messages": [{"role": "user", "content": "first file, second"}]}]
MORE_LINES = [{"prompt": "second file, one line", "max_tokens": 5}]
SHAREGPT = REPO / "scenarios" / "data" / "sharegpt-sample.json"
CHATS = json.loads(SHAREGPT.read_text())  # 40 conversations


def parquet_bytes(folder: Path, name: str, prompts: list[str]) -> bytes:
    """A Parquet file of ``{"prompt": ...}`` rows, written with pyarrow (as the Hub's conversion writes them)."""
    path = folder / name
    pq.write_table(pa.table({"prompt": prompts}), path)
    return path.read_bytes()


def parquet_table(folder: Path, name: str, items: list[dict]) -> bytes:
    path = folder / name
    pq.write_table(pa.Table.from_pylist(items), path)
    return path.read_bytes()


def jsonl_bytes(records: list[dict]) -> bytes:
    return "".join(json.dumps(record) + "\n" for record in records).encode()


@dataclass
class FakeHub:
    """The Hub's routes huggingface_hub 2.4.0 calls to list and download a dataset's files: the tree
    (``GET /api/datasets/ORG/NAME/tree/REV``) and a file (``HEAD`` and ``GET /datasets/ORG/NAME/resolve/REV/PATH``,
    with the X-Repo-Commit, ETag and Content-Length headers it requires). ``gated`` repos answer a file with 401 and
    X-Error-Code GatedRepo unless the request carries ``token``. It counts each request by method and route and
    keeps the Authorization headers it was sent."""

    repos: dict[str, dict[str, bytes]]
    gated: set[str] = field(default_factory=set)
    token: str = TOKEN
    requests: Counter = field(default_factory=Counter)
    authorizations: list[str] = field(default_factory=list)

    def start(self) -> FakeHub:
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as huggingface_hub's client expects

            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                hub.answer(self, body=True)

            def do_HEAD(self) -> None:  # noqa: N802
                hub.answer(self, body=False)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def answer(self, handler: BaseHTTPRequestHandler, body: bool) -> None:
        self.authorizations.append(handler.headers.get("Authorization", ""))
        parts = [unquote(part) for part in urlsplit(handler.path).path.split("/")]
        if parts[1:3] == ["api", "datasets"] and len(parts) >= 7 and parts[5] == "tree":  # /api/datasets/O/N/tree/R
            route, repo, revision = "tree", "/".join(parts[3:5]), parts[6]
            path = ""
        elif parts[1] == "datasets" and len(parts) >= 7 and parts[4] == "resolve":  # /datasets/O/N/resolve/R/PATH
            route, repo, revision, path = "resolve", "/".join(parts[2:4]), parts[5], "/".join(parts[6:])
        else:
            return self.send(handler, 404, b"", body)
        self.requests[handler.command, route] += 1
        files = self.repos.get(repo)
        if files is None:
            return self.send(handler, 404, b'{"error": "Repository not found"}', body, {"X-Error-Code": "RepoNotFound"})
        if revision not in ("main", COMMIT):
            return self.send(handler, 404, b'{"error": "Invalid rev"}', body, {"X-Error-Code": "RevisionNotFound"})
        if route == "tree":
            listing = [
                {"type": "file", "path": name, "size": len(data), "oid": f"{name}-oid"} for name, data in files.items()
            ]
            return self.send(handler, 200, json.dumps(listing).encode(), body, {"Content-Type": "application/json"})
        if repo in self.gated and handler.headers.get("Authorization") != f"Bearer {self.token}":
            headers = {"X-Error-Code": "GatedRepo", "X-Error-Message": "Access to this dataset is restricted."}
            return self.send(handler, 401, b"", body, headers)
        if path not in files:
            return self.send(handler, 404, b"", body, {"X-Error-Code": "EntryNotFound", "X-Repo-Commit": COMMIT})
        data = files[path]
        return self.send(handler, 200, data, body, {"X-Repo-Commit": COMMIT, "ETag": f'"{path}-etag"'})

    @staticmethod
    def send(handler: BaseHTTPRequestHandler, status: int, data: bytes, body: bool, headers: dict | None = None):
        handler.send_response(status)
        for name, value in (headers or {}).items():
            handler.send_header(name, value)
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        if body:
            handler.wfile.write(data)

    def downloads(self) -> int:
        """The file contents it sent (GETs of the resolve route)."""
        return self.requests["GET", "resolve"]


@pytest.fixture
def files(tmp_path) -> dict[str, dict[str, bytes]]:
    """The fake Hub's datasets: Parquet with train and test splits (and a README), JSON lines in two files, a gated
    one, and one with no data file."""
    made = tmp_path / "made"
    made.mkdir()
    train = parquet_bytes(made, "train.parquet", TRAIN)
    return {
        "local/tiny": {
            "README.md": b"# tiny\n",
            "data/test-00000-of-00001.parquet": parquet_bytes(made, "test.parquet", TEST),
            "data/train-00000-of-00001.parquet": train,
        },
        "local/lines": {"b.jsonl": jsonl_bytes(MORE_LINES), "a.jsonl": jsonl_bytes(LINES), "notes.txt": b"x"},
        "local/gated": {"data.parquet": train},
        "local/chats": {  # ShareGPT: the sample as JSON, and as Parquet in two halves
            "sharegpt.json": SHAREGPT.read_bytes(),
            **{
                f"data/train-0000{half}-of-00002.parquet": parquet_table(made, f"chats{half}.parquet", items)
                for half, items in enumerate((CHATS[:20], CHATS[20:]))
            },
        },
        "local/empty": {"README.md": b"# nothing to read\n"},
    }


def use_hub(monkeypatch, home: Path, endpoint: str) -> None:
    """This process and the ones it starts use ``endpoint`` as the Hub and ``home`` as HF_HOME, with no token and
    online: the environment for the processes, huggingface_hub's constants (read when it was imported) for this
    one; nothing resolved yet."""
    from huggingface_hub import constants

    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE", "HF_HUB_CACHE", "HF_TOKEN_PATH"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_ENDPOINT", endpoint)
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    monkeypatch.setattr(constants, "ENDPOINT", endpoint)
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", endpoint + "/{repo_id}/resolve/{revision}/{filename}")
    monkeypatch.setattr(constants, "HF_HOME", str(home))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(home / "hub"))
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(home / "token"))
    monkeypatch.setattr(constants, "HF_STORED_TOKENS_PATH", str(home / "stored_tokens"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(hubdataset, "_resolved", {})


@pytest.fixture
def hub(files, tmp_path, monkeypatch) -> Iterator[FakeHub]:
    """A fake Hub serving ``files``, used by this process (and its children) with an empty cache in ``tmp_path``."""
    fake = FakeHub(files, gated={"local/gated"}).start()
    use_hub(monkeypatch, tmp_path / "hf", fake.url)
    yield fake
    fake.stop()


def texts(dataset: str) -> list[tuple[str, int]]:
    return [(spec.text, spec.max_tokens) for spec in load_dataset(dataset)]


def test_an_id_names_a_dataset_its_revision_and_a_path():
    assert is_hub_id("hf:org/name") and not is_hub_id("prompts.jsonl") and not is_hub_id("./hf:org/name")
    assert parse("hf:org/name") == hubdataset.HubId("hf:org/name", "org/name", None, "")
    assert parse("hf:org/name@v1.0/data/train.parquet").revision == "v1.0"
    assert parse("hf:org/name@v1.0/data/train.parquet").path == "data/train.parquet"
    ref = parse("hf:org/name@refs/convert/parquet/default/train/0000.parquet")
    assert (ref.repo, ref.revision, ref.path) == ("org/name", "refs/convert/parquet", "default/train/0000.parquet")
    assert parse("hf:org/name/sub/folder/").path == "sub/folder"
    for bad in ("hf:name", "hf:", "hf:org/na me", "hf:org/name@"):
        with pytest.raises(HubDatasetError, match=r"^hf:.*: not a Hub dataset id: expected hf:ORG/NAME"):
            parse(bad)
    assert local_paths("prompts.jsonl") == ["prompts.jsonl"]  # a local file is itself


@pytest.mark.parametrize(
    ("files", "path", "picked"),
    [
        (
            ["README.md", "data/test-0.parquet", "data/train-1.parquet", "data/train-0.parquet"],
            "",
            ["data/train-0.parquet", "data/train-1.parquet"],
        ),
        (["default/train/0000.parquet", "default/validation/0000.parquet"], "", ["default/train/0000.parquet"]),
        (
            ["b.parquet", "a.parquet", "x.jsonl", "constrained.parquet"],
            "",
            ["a.parquet", "b.parquet", "constrained.parquet"],
        ),
        (["test.parquet", "validation.parquet"], "", ["test.parquet", "validation.parquet"]),  # splits, no train
        (["b.jsonl", "a.jsonl", "c.json"], "", ["a.jsonl", "b.jsonl"]),
        (["en/train/0.parquet", "fr/train/0.parquet"], "fr", ["fr/train/0.parquet"]),  # a folder: a config
        (["data.json", "x.parquet"], "data.json", ["data.json"]),  # a named file, whatever its kind
    ],
)
def test_the_files_taken(files, path, picked):
    """A named file; else the Parquet files (the train split's when the names say splits), else the JSON lines."""
    assert pick(parse(f"hf:org/name/{path}" if path else "hf:org/name"), files) == picked


def test_no_data_file_is_one_line_naming_the_dataset():
    with pytest.raises(HubDatasetError) as error:
        pick(parse("hf:org/name"), ["README.md", "data.csv"])
    assert str(error.value).startswith("hf:org/name: no .parquet or .jsonl data files at revision main (the Hub's")
    assert "hf:org/name@refs/convert/parquet" in str(error.value)
    with pytest.raises(HubDatasetError, match=r"^hf:org/name/nope\.parquet: no file or folder nope\.parquet at"):
        pick(parse("hf:org/name/nope.parquet"), ["data.parquet"])


def test_a_parquet_dataset_reads_as_its_local_file_and_downloads_once(hub, files, tmp_path):
    local = tmp_path / "train.parquet"
    local.write_bytes(files["local/tiny"]["data/train-00000-of-00001.parquet"])
    assert texts("hf:local/tiny") == texts(str(local)) == [(text, 0) for text in TRAIN]  # the train split only
    assert hub.requests == {("GET", "tree"): 1, ("HEAD", "resolve"): 1, ("GET", "resolve"): 1}
    [path] = local_paths("hf:local/tiny")
    assert Path(path).read_bytes() == local.read_bytes() and str(tmp_path / "hf" / "hub") in path  # HF_HOME's cache
    assert texts("hf:local/tiny") == texts(str(local))
    assert sum(hub.requests.values()) == 3  # again in this process: nothing asked
    hubdataset._resolved.clear()  # another process, the same cache: the files are checked, not downloaded again
    assert local_paths("hf:local/tiny") == [path]
    assert hub.downloads() == 1 and hub.requests["HEAD", "resolve"] == 2


def test_json_lines_files_are_read_one_after_the_other(hub, tmp_path):
    for name, records in (("a.jsonl", LINES), ("b.jsonl", MORE_LINES)):
        (tmp_path / name).write_bytes(jsonl_bytes(records))
    expected = texts(str(tmp_path / "a.jsonl")) + texts(str(tmp_path / "b.jsonl"))
    assert (
        texts("hf:local/lines")
        == expected
        == [
            ("first file, first line", 0),
            ("first file, second", 0),
            ("second file, one line", 5),
        ]
    )
    assert [Path(p).name for p in local_paths("hf:local/lines")] == ["a.jsonl", "b.jsonl"]  # not notes.txt


def test_one_file_by_its_path_and_revision(hub):
    assert texts("hf:local/tiny/data/test-00000-of-00001.parquet") == [(TEST[0], 0)]
    assert texts(f"hf:local/tiny@{COMMIT}/data/train-00000-of-00001.parquet") == [(text, 0) for text in TRAIN]
    assert texts("hf:local/lines@main/b.jsonl") == [("second file, one line", 5)]
    assert hub.downloads() == 3


def test_sharegpt_conversations_from_the_hub_are_the_files(hub):
    """The session user's conversations and the chat user's first turns, from a JSON file or from the Parquet files
    of the train split, read one after the other."""
    from vllm_stress.users.session import dataset_conversations

    conversations = read_conversations(str(SHAREGPT))
    for dataset in ("hf:local/chats/sharegpt.json", "hf:local/chats"):
        assert dataset_conversations(dataset, 0) == conversations
        assert texts(dataset) == [(turns[0], 0) for turns in conversations]
    assert [Path(p).name for p in local_paths("hf:local/chats")] == [
        "train-00000-of-00002.parquet",
        "train-00001-of-00002.parquet",
    ]


def refusal(dataset: str) -> str:
    """The one line the test start's check gives for ``--dataset DATASET``."""
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    with pytest.raises(StopTarget) as error:
        validate(parser.parse_args(["--dataset", dataset]))
    assert "\n" not in str(error.value)
    return str(error.value)


def test_what_cannot_be_had_is_one_line_at_the_test_start(hub):
    assert refusal("hf:local/nope") == (
        f"--dataset hf:local/nope: no such dataset at {hub.url} (a private or gated one needs HF_TOKEN)"
    )
    assert refusal("hf:local/tiny@v9") == f"--dataset hf:local/tiny@v9: no revision v9 at {hub.url}"
    assert refusal("hf:local/tiny/data/none.parquet") == (
        "--dataset hf:local/tiny/data/none.parquet: no file or folder data/none.parquet at revision main"
    )
    assert refusal("hf:local/empty").startswith("--dataset hf:local/empty: no .parquet or .jsonl data files at")
    assert refusal("hf:local/gated") == (
        "--dataset hf:local/gated: a gated dataset: accept its conditions on its Hub page and set HF_TOKEN to a "
        "token of that account"
    )
    assert hub.downloads() == 0


def test_an_unreachable_hub_is_one_line_after_the_retries(hub, monkeypatch, tmp_path):
    """huggingface_hub retries a request that could not connect (1, 2, 4, 8 and 8 s apart: not waited here)."""
    from huggingface_hub.utils import _http

    waits: list[float] = []
    clock = {name: getattr(time, name) for name in dir(time) if not name.startswith("_")}
    monkeypatch.setattr(_http, "time", SimpleNamespace(**{**clock, "sleep": waits.append}))
    use_hub(monkeypatch, tmp_path / "hf", NOWHERE)
    message = refusal("hf:local/tiny")
    assert message.startswith(f"--dataset hf:local/tiny: cannot reach {NOWHERE} (ConnectError: "), message
    assert waits == [1, 2, 4, 8, 8]


def test_the_token_is_sent_as_a_bearer_and_never_shown(hub, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_notTheRightOne")
    message = refusal("hf:local/gated")
    assert message.startswith("--dataset hf:local/gated: a gated dataset") and "hf_notTheRightOne" not in message
    assert "Bearer hf_notTheRightOne" in hub.authorizations
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    assert texts("hf:local/gated") == [(text, 0) for text in TRAIN]
    assert set(hub.authorizations[-2:]) == {f"Bearer {TOKEN}"}  # the gated file's HEAD and GET
    message = refusal("hf:local/nope")
    assert message.startswith("--dataset hf:local/nope: no such dataset") and TOKEN not in message


def test_offline_the_cache_answers(hub, monkeypatch):
    from huggingface_hub import constants

    online = local_paths("hf:local/tiny")
    asked = sum(hub.requests.values())
    hubdataset._resolved.clear()
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    assert local_paths("hf:local/tiny") == online and sum(hub.requests.values()) == asked
    assert refusal("hf:local/lines") == (
        "--dataset hf:local/lines: not in the local Hugging Face cache (HF_HUB_OFFLINE is set: run once online first)"
    )


def test_a_locust_run_sends_the_hub_datasets_prompts(hub, simulator, run_locust, tmp_path):
    """A chat run with ``--dataset hf:local/tiny`` (downloaded by the Locust process into the test's HF_HOME): every
    row's prompt is one of the train split's, its length as the server counts that prompt; an unknown dataset stops
    the run at its start with one line and exit code 2."""
    sim = simulator("--profile", "cpu-tiny")
    out = tmp_path / "run"
    env = {"HF_ENDPOINT": hub.url, "HF_HOME": str(tmp_path / "hf")}
    proc = run_locust(
        *("-f", "locustfiles/chat.py", "-H", sim.url, "-u", "2", "-r", "2", "-t", "4s", "--headless"),
        *("--only-summary", "--output-tokens", "8", "--results-dir", str(out), *NO_CANARIES),
        *("--dataset", "hf:local/tiny"),
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    sizes = {
        text: requests.post(
            f"{sim.url}/tokenize",
            json={"model": sim.model, "messages": [{"role": "user", "content": text}], "add_generation_prompt": True},
            timeout=10,
        ).json()["count"]
        for text in [*TRAIN, *TEST]
    }
    train_sizes = {sizes[text] for text in TRAIN}
    assert len(train_sizes) == len(TRAIN) and sizes[TEST[0]] not in train_sizes
    rows = [row for row in read_rows(out / "requests.csv") if row["ok"] == "1"]
    assert rows and all(int(r["prompt_tokens"]) == int(r["target_prompt_tokens"]) for r in rows)
    assert {int(r["prompt_tokens"]) for r in rows} == train_sizes  # each of them (hundreds of rows), no other
    assert hub.downloads() == 1  # the Locust process's
    proc = run_locust(
        *("-f", "locustfiles/chat.py", "-H", NOWHERE, "--headless", "--only-summary", "-u", "1", "-t", "5s"),
        *("--results-dir", str(tmp_path / "refused"), "--dataset", "hf:local/nope"),
        env=env,
        timeout=60,
    )
    refused(proc, f"--dataset hf:local/nope: no such dataset at {hub.url}")
