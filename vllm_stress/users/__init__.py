"""The Locust user classes and the plugin that makes a process's target ready; each user module is a locustfile."""

from pathlib import Path

LOCUSTFILES = (
    "chat",
    "completions",
    "responses",
    "messages",
    "embeddings",
    "rerank",
    "score",
    "audio",
    "generate",
    "sdk",
    "session",
    "agent",
)


def locustfile(name: str) -> Path:
    """The file of a user class (``vllm_stress/users/NAME.py``), to pass to ``locust -f``."""
    if name not in LOCUSTFILES:
        raise ValueError(f"no locustfile {name!r} (one of: {', '.join(LOCUSTFILES)})")
    return Path(__file__).with_name(f"{name}.py")
