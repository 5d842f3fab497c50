"""The report: the pipeline from run folders to report.md, report.html and summary.json, its blocks (document) and
how they render, the Method section, and the report of a parallel-query run."""
