"""A pure, clock-free model of vLLM's V1 engine core, with no HTTP: the scheduler and its sequences, the paged KV cache,
the step-time model, LoRA slots, the scheduling policies, speculative decoding, and the engine run in virtual time
(docs/concepts/simulator.md)."""
