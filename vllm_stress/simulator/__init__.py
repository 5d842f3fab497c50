"""An embedded vLLM simulator: vLLM's OpenAI-compatible HTTP API, errors and /metrics over a model of its V1 engine,
one module per concern (docs/concepts/simulator.md)."""
