"""One request as a client process makes and measures it: prompts, the SSE reader and its clock, timings, arrivals,
option checks, the rows a process ships. Imports only the core."""
