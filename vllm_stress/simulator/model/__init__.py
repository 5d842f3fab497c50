"""The simulated model itself, clock-free and without HTTP: its profile (hardware, model, parallelism, engine defaults),
the words and answers it generates, its tool calls and structured outputs, its tokenizer and image inputs, and the
refusal its checks raise (docs/concepts/simulator.md)."""
