"""What other modules see of one simulated instance (server.py's ``Simulator``), so that they need not import the
server that imports them: the old ``/generate`` route (legacy.py) uses its parts, and a P/D instance's KV transfer
(disagg.py) plugs into it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ..model.profiles import Profile
    from ..model.tokenizer import Tokenizer
    from .driver import EngineDriver
    from .streams import Generator


class Instance(Protocol):
    """The parts of a simulated instance a route uses."""

    profile: Profile
    tokenizer: Tokenizer
    generator: Generator
    driver: EngineDriver


class KvTransfer(Protocol):
    """One instance's side of the KV transfer between P/D instances (disagg.py's ``KvConnector``)."""

    def produced(self, params: object, prompt_tokens: int) -> dict | None: ...

    async def receive(self, params: object, prompt_tokens: int) -> tuple[int, float] | None: ...
