"""One request as a client process makes and measures it: prompts of exact lengths, the SSE reader and its clock,
the exchange's timings, arrivals and traces, the option checks, the rows a process ships. Imports only the core."""
