"""Reading and writing run data: run folders in (load), the results store, summary.json's JSON types, and the exports
other tools read (vLLM's bench-serve JSON, llm-d's Benchmark Report); synthetic run folders with known answers."""
