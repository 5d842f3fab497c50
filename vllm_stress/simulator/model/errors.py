"""The refusal of a request, raised wherever its content is checked (request parsing, LoRA adapters, images,
structured outputs): vLLM's HTTP status, its message and the field at fault. The routes answer it with vLLM's error
body (parsing.py's ``error_body``)."""

from __future__ import annotations


class ApiError(Exception):
    def __init__(self, message: str, status: int = 400, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.param = param
