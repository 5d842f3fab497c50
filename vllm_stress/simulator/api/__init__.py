"""vLLM's HTTP face over one engine (aiohttp): the routes and their parsing and errors, the response shapes and streams,
the real-time driver of the engine, /metrics, the request log and the exported spans (docs/concepts/simulator.md)."""
