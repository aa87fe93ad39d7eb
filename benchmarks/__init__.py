"""hopmem's benchmarks: runnable scripts here, asv suites in ``asv/``, evaluation data in ``data/``.

See benchmarks/README.md for what is where and how to run each.
"""

from __future__ import annotations

import importlib
from types import ModuleType


def __getattr__(name: str) -> ModuleType:
    # compare.py imports the asv suite's workload as ``benchmarks.bench_engine``, where it lived before
    # the suites moved to benchmarks/asv/
    if name == "bench_engine":
        return importlib.import_module("benchmarks.asv.bench_engine")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
