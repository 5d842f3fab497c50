"""What the console says of a run: a progress line every ``LOG_INTERVAL_S`` and the closing line."""

from __future__ import annotations

from collections import Counter
from typing import Any

LOG_INTERVAL_S = 10.0


def progress_line(users: int, output_tokens_per_s: float, totals: Counter[str]) -> str:
    """The line logged every LOG_INTERVAL_S of a run without a load shape (a shape logs its phases instead)."""
    return (
        f"level {users} users | output {output_tokens_per_s:.0f} tok/s | {totals['requests']} requests, "
        f"{totals['failures']} failed, {totals['aborted']} aborted"
    )


def closing_line(path: str, totals: Counter[str], unaccounted: int | None, lost_workers: list[dict[str, Any]]) -> str:
    """The line logged when a run folder closes: its rows by outcome, and requests the server served without a row."""
    return (
        f"{path}: {totals['requests']} requests{canaries_note(totals)}, {totals['failures']} failed, "
        f"{totals['mismatches']} with token counts off target; {totals['aborted']} streams aborted when the run "
        "stopped (not failures)"
        + (f", {totals['cancelled']} cancelled by the client (--cancel-share)" if totals["cancelled"] else "")
        + unaccounted_note(unaccounted, lost_workers)
    )


def canaries_note(totals: Counter[str]) -> str:
    """' (of which N correctness canaries, M session primers)': the requests in no figure, or '' without any."""
    apart = [f"{totals['canaries']} correctness canaries"] if totals["canaries"] else []
    apart += [f"{totals['primers']} session primers"] if totals["primers"] else []
    return f" (of which {', '.join(apart)})" if apart else ""


def unaccounted_note(unaccounted: int | None, lost_workers: list[dict[str, Any]]) -> str:
    """'; N more served by the server and lost with worker(s) ...', or '' when every request has its row."""
    if not unaccounted:
        return ""
    if lost := ", ".join(lost["worker"] for lost in lost_workers):
        return f"; {unaccounted} more served by the server and lost with worker(s) {lost}"
    return f"; {unaccounted} more served by the server (no worker lost: another client of the server?)"
