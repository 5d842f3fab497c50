"""vLLM's development route the suite uses, ``POST /reset_prefix_cache``: vllm serve registers it only in its
development mode (``VLLM_SERVER_DEV_MODE=1``), and without it the route is not found (404). The simulator's
``--dev-mode`` (or the same environment variable) registers it: the engine's prefix cache emptied as vLLM's scheduler
empties its own (``Engine.reset_prefix_cache``), with vLLM's query flags ``reset_running_requests`` and
``reset_external``, answered ``{"success": bool}``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

if TYPE_CHECKING:
    from ..engine.core import Engine

DEV_MODE_VARIABLE = "VLLM_SERVER_DEV_MODE"  # vllm serve's switch of its development routes
TRUE_WORDS = ("1", "true", "yes", "on")  # a true boolean query value, as FastAPI reads one


def query_flag(request: web.Request, name: str) -> bool:
    return request.query.get(name, "").strip().lower() in TRUE_WORDS


class DevRoutes:
    """The development routes, on one engine."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def attach(self, app: web.Application) -> None:
        app.router.add_post("/reset_prefix_cache", self.reset_prefix_cache)

    async def reset_prefix_cache(self, request: web.Request) -> web.Response:
        running, external = (query_flag(request, name) for name in ("reset_running_requests", "reset_external"))
        return web.json_response({"success": self.engine.reset_prefix_cache(running, external)})
