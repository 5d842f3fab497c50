"""An embedded vLLM simulator: vLLM's OpenAI-compatible HTTP API, errors and /metrics over a model of its V1 engine.

Modules, one per concern: ``engine`` (V1 scheduler, pure and clock-free), ``kvcache`` (paged KV blocks, prefix cache),
``steptime`` (roofline step duration), ``profiles`` (+ ``profiles/*.toml``), ``tokenizer`` (deterministic tokens and
chat template), ``sampling`` (generated words, EOS positions), ``parsing`` (request validation, errors), ``protocol``
(response and SSE chunk shapes), ``streams`` (token hand-off to HTTP responses), ``driver`` (real-time engine loop),
``metrics`` and ``httpmetrics`` (Prometheus), ``server`` and ``legacy`` (aiohttp routes), ``virtual`` (virtual-time closed loop),
``process`` (start it as a child process), ``__main__`` (command line).
"""
