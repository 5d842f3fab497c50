"""The report's figures (matplotlib): per-config plots against users, timelines, the Pareto front and scaling."""
