"""An embedded vLLM simulator: vLLM's OpenAI-compatible HTTP API, errors and /metrics over a model of its V1 engine,
one module per concern, in four rooms, each importing only those before it: ``model`` (what the model is and says),
``engine`` (the clock-free engine, no HTTP), ``api`` (the HTTP server), ``pd`` (disaggregated prefill/decode); and
``cli.py`` and ``process.py`` in front (docs/concepts/simulator.md)."""
