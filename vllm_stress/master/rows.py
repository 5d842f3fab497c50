"""Reading ``requests.csv`` rows while they are still lists on the master: column positions and populations."""

from typing import Any

from vllm_stress.core import schema

(
    COMPLETION,
    END,
    OK,
    MISMATCH,
    USERS,
    TTFT,
    TPOT,
    E2E,
    START,
    CHUNKS,
    ERROR,
    FINISH,
    SCHEDULE_LAG,
    PROMPT,
    NAME,
    TTFA,
    REASONING,
    CLASS,
    CANARY,
    INPUTS,
    ENDPOINT,
) = (
    schema.REQUEST_COLUMNS.index(column)
    for column in (
        "completion_tokens",
        "end_time",
        "ok",
        "count_mismatch",
        "users",
        "ttft_s",
        "tpot_s",
        "e2e_s",
        "start_time",
        "chunks",
        "error",
        "finish_reason",
        "schedule_lag_s",
        "prompt_tokens",
        "name",
        "ttfa_s",
        "reasoning_tokens",
        "class",
        "canary",
        "inputs",
        "endpoint",
    )
)
QUERY_APIS = ("rerank", "score")  # the pooling APIs whose requests hold a query besides their inputs (documents)


def measured(row: list) -> bool:
    """Exchange.measured, read back from a row."""
    return bool(row[OK]) and not row[MISMATCH] and row[FINISH] != "abort"


def engine_requests(row: list) -> int:
    """The requests the server's engine counts for a row: one, or a pooling request's inputs (vLLM runs each input,
    or each query-document pair of a cross-encoder, as a request of its own). On an embedding model a rerank or score
    request embeds its query too: one more, counted so that no row seems missing."""
    if not row[INPUTS]:
        return 1
    return int(row[INPUTS]) + (str(row[ENDPOINT]).rsplit("/", 1)[-1] in QUERY_APIS)


def aborted(row: list) -> bool:
    """The run or a cooldown stopped the stream (not a failure)."""
    return not row[OK] and row[ERROR] == schema.ABORTED


def canaries_counted(environment: Any) -> bool:
    """--canaries-in-figures: the correctness canaries' rows count in the live figures (off: kept apart)."""
    return bool(getattr(getattr(environment, "parsed_options", None), "canaries_in_figures", False))


def in_figures(row: list, canaries_counted: bool) -> bool:
    """The row counts in the live figures: every row but a correctness canary's, unless ``canaries_counted``, and
    never a session primer's (--session-primer: it warms the cache, it is no load)."""
    return (canaries_counted or not row[CANARY]) and not primer(row)


def primer(row: list) -> bool:
    """A session's primer (--session-primer): it warms the prefix cache, it is no load."""
    return row[NAME] == schema.SESSION_PRIMER


def cancelled(row: list) -> bool:
    """The client cancelled the request on purpose (--cancel-share): not a failure, in no latency figure."""
    return not row[OK] and row[ERROR] == schema.CANCELLED


def apart(row: list) -> bool:
    """Neither a success nor a failure: aborted by the stop, or cancelled by the client."""
    return not row[OK] and row[ERROR] in (schema.ABORTED, schema.CANCELLED)
