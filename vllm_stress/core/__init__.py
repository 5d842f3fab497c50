"""The core: definitions the load generator and the analysis share (the run folder's schema, metric and quantile
rules, the steady-state and bound rules, failure names). Imports nothing else of the suite, nor Locust or pandas."""
