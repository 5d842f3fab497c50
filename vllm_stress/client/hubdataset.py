"""``--dataset hf:ORG/NAME[@REVISION][/PATH]``: a Hugging Face Hub dataset's data files, downloaded with
huggingface_hub (the Hub's URLs, HF_TOKEN, the cache every Hugging Face tool shares, HF_HUB_OFFLINE, its retries)
and then read as a local ``--dataset`` file is.

The files taken: PATH when it names a file; else the dataset's (or PATH's folder's) ``.parquet`` files, or if it
has none its ``.jsonl`` files, those of the train split when the names say splits (``data/train-00000-of-00001``,
``default/train/0000``), sorted, read one after the other. REVISION is a branch, tag or commit, or a ``refs/...``
ref such as ``refs/convert/parquet`` (the Hub's Parquet conversion of a dataset). Each failure is a
``HubDatasetError``: one line naming the dataset, never the token.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import NoReturn

PREFIX = "hf:"
FORM = "hf:ORG/NAME[@REVISION][/PATH]"
DATA_SUFFIXES = (".parquet", ".jsonl")  # in this order: a dataset's Parquet files, else its JSON lines
TRAIN_WORDS = {"train", "training"}  # a split's names, as the Hub's datasets library reads them from file names
SPLIT_WORDS = TRAIN_WORDS | {"test", "testing", "eval", "evaluation", "validation", "valid", "val", "dev"}
# ORG/NAME, then @REVISION (a refs/KIND/NAME ref or one word), then the path in the repository
HUB_ID = re.compile(r"(?P<repo>[^/@\s]+/[^/@\s]+)(?:@(?P<revision>refs/[^/]+/[^/]+|[^/]+))?(?:/(?P<path>.+))?")

_resolved: dict[str, list[str]] = {}  # --dataset value -> its local files, per process


class HubDatasetError(ValueError):
    """A Hub dataset that cannot be had: ``hf:ORG/NAME: why`` on one line."""


@dataclass(frozen=True)
class HubId:
    text: str  # as given: hf:ORG/NAME...
    repo: str
    revision: str | None
    path: str  # a file or folder in the repository, "" for the whole dataset

    def fail(self, reason: str) -> NoReturn:
        line = " ".join(f"{self.text}: {reason}".split())  # one line
        for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):  # whatever a message quoted, never the token
            if token := os.environ.get(name, "").strip():
                line = line.replace(token, f"<{name}>")
        raise HubDatasetError(line)


def is_hub_id(text: str) -> bool:
    """Whether a --dataset value names a Hub dataset (``hf:...``) rather than a local file."""
    return text.startswith(PREFIX)


def parse(text: str) -> HubId:
    match = HUB_ID.fullmatch(text.removeprefix(PREFIX))
    if not match:
        HubId(text, "", None, "").fail(f"not a Hub dataset id: expected {FORM}")
    return HubId(text, match["repo"], match["revision"], (match["path"] or "").strip("/"))


def local_paths(text: str) -> list[str]:
    """The local files a --dataset value names: a local path itself, or a Hub dataset's files, downloaded once per
    process (huggingface_hub's cache makes another process's call a few metadata requests). HubDatasetError."""
    if not is_hub_id(text):
        return [text]
    if text not in _resolved:
        _resolved[text] = download(parse(text))
    return _resolved[text]


def download(hub: HubId) -> list[str]:
    """The chosen data files of ``hub``, listed and downloaded (offline: found in the cache)."""
    import httpx2  # huggingface_hub's HTTP client
    import huggingface_hub  # here, not above: a Locust process without an hf: dataset does not load it
    from huggingface_hub import constants

    repo, kind, revision = hub.repo, "dataset", hub.revision
    try:
        if constants.is_offline_mode():  # the files an earlier call downloaded
            patterns = [f"*{suffix}" for suffix in DATA_SUFFIXES]
            folder = huggingface_hub.snapshot_download(
                repo, repo_type=kind, revision=revision, local_files_only=True, allow_patterns=patterns
            )
            return [os.path.join(folder, name) for name in pick(hub, cached_files(folder))]
        chosen = pick(hub, huggingface_hub.HfApi().list_repo_files(repo, repo_type=kind, revision=revision))
        return [huggingface_hub.hf_hub_download(repo, name, repo_type=kind, revision=revision) for name in chosen]
    except HubDatasetError:
        raise
    except (OSError, ValueError, httpx2.HTTPError, httpx2.InvalidURL) as error:  # huggingface_hub's errors among them
        hub.fail(reason(hub, error))


def cached_files(folder: str) -> list[str]:
    """The files of a cached snapshot folder, by their path in the repository."""
    return [
        os.path.relpath(os.path.join(root, name), folder).replace(os.sep, "/")
        for root, _, names in os.walk(folder)
        for name in names
    ]


def pick(hub: HubId, files: list[str]) -> list[str]:
    """The files to read of a revision's ``files``: its named file, else the data files of the dataset (or of the
    named folder), the train split's when the names say splits."""
    revision = hub.revision or "main"
    if hub.path:
        if hub.path in files:
            return [hub.path]
        files = [name for name in files if name.startswith(hub.path + "/")]
        if not files:
            hub.fail(f"no file or folder {hub.path} at revision {revision}")
    for suffix in DATA_SUFFIXES:
        if data := sorted(name for name in files if name.endswith(suffix)):
            splits = [set(re.split(r"[^a-z]+", name.lower())) for name in data]
            if any(words & SPLIT_WORDS for words in splits) and (
                train := [name for name, words in zip(data, splits, strict=True) if words & TRAIN_WORDS]
            ):
                return train
            return data
    hub.fail(
        f"no .parquet or .jsonl data files at revision {revision} (the Hub's Parquet conversion of a dataset is "
        f"{PREFIX}{hub.repo}@refs/convert/parquet; name a .json file as {PREFIX}{hub.repo}/FILE.json)"
    )


def reason(hub: HubId, error: Exception) -> str:
    """Why ``error`` (of huggingface_hub or its HTTP client) kept the dataset away, in a few words."""
    import httpx2
    from huggingface_hub import constants, errors

    endpoint = constants.ENDPOINT
    if isinstance(error, errors.GatedRepoError):
        return "a gated dataset: accept its conditions on its Hub page and set HF_TOKEN to a token of that account"
    if isinstance(error, errors.RepositoryNotFoundError):
        return f"no such dataset at {endpoint} (a private or gated one needs HF_TOKEN)"
    if isinstance(error, errors.RevisionNotFoundError):
        return f"no revision {hub.revision} at {endpoint}"
    if isinstance(error, errors.EntryNotFoundError) and not isinstance(error, errors.LocalEntryNotFoundError):
        return f"no file {hub.path} at {endpoint}"
    if constants.is_offline_mode() or isinstance(error, errors.OfflineModeIsEnabled):
        return "not in the local Hugging Face cache (HF_HUB_OFFLINE is set: run once online first)"
    if isinstance(error, errors.HfHubHTTPError) and error.response is not None:
        status = error.response.status_code
        return f"HTTP {status} from {endpoint}" + (" (HF_TOKEN was not accepted)" if status == 401 else "")
    if isinstance(error, errors.HFValidationError):
        return f"not a Hub dataset id ({first_line(error)}): expected {FORM}"
    # a request's error, or what hf_hub_download's "cannot find ... in the local cache" says of a failed request
    cause = error if isinstance(error, httpx2.HTTPError) else (error.__cause__ or error)
    described = type(cause).__name__ + (f": {first_line(cause)}" if first_line(cause) else "")
    if isinstance(cause, httpx2.TransportError):
        return f"cannot reach {endpoint} ({described})"
    return described  # the cache's disk (HF_HOME), most likely


def first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [""])[0]
