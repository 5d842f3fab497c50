"""A working-set sweep (``--shape working-set:C1,C2,...``): levels at a fixed number of users over the number of
distinct shared contexts the prompts come back to, each --prefix-tokens long, so each level's working set is its
contexts × --prefix-tokens tokens (docs/concepts/kv-tiers.md, "Working-set sweep"). Its grammar, read by the load
shape, the users and the analysis."""

from __future__ import annotations

WORKING_SET = "working-set"  # --shape working-set:C1,C2,...


def sweep_contexts(shape: str | None) -> list[int] | None:
    """The contexts of each level of a working-set sweep's ``--shape``, None for any other shape; a one-line
    ValueError unless they are whole numbers, at least 1, ascending."""
    kind, _, rest = str(shape or "").strip().partition(":")
    if kind != WORKING_SET:
        return None
    try:
        contexts = [int(part) for part in rest.split(",") if part.strip()]
    except ValueError:
        raise ValueError(f"--shape {WORKING_SET}: contexts are whole numbers, got {rest!r}") from None
    if not contexts:
        raise ValueError(f"--shape {WORKING_SET}:C1,C2,...: name each level's contexts")
    if contexts[0] < 1 or any(b <= a for a, b in zip(contexts, contexts[1:], strict=False)):
        raise ValueError(f"--shape {WORKING_SET}: contexts must be at least 1 and ascending, got {rest!r}")
    return contexts
