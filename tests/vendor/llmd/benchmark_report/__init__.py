"""
Benchmark Report standardized reporting format.
"""

from .base import BenchmarkReport
from .core import (
    get_nested,
    import_benchmark_report,
    import_yaml,
    load_benchmark_report,
    make_json_schema,
    update_dict,
    yaml_str_to_benchmark_report,
)
from .schema_v0_1 import BenchmarkReportV01
from .schema_v0_2 import BenchmarkReportV02
from .schema_v0_2_1 import BenchmarkReportV021

__all__ = [
    "BenchmarkReport",
    "BenchmarkReportV01",
    "BenchmarkReportV02",
    "BenchmarkReportV021",
    "get_nested",
    "import_benchmark_report",
    "import_yaml",
    "load_benchmark_report",
    "make_json_schema",
    "update_dict",
    "yaml_str_to_benchmark_report",
]
