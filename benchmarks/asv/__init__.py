"""The asv suites (``asv.conf.json``'s ``benchmark_dir``): speed, memory and quality tracked over commits.

asv imports this folder as a package of its own, so the suites import the
rest of the benchmarks (``benchmarks.agent_eval``, ``benchmarks.store_bench``)
by their full names; the repository root is put on the path here for that,
as ``ASV_PYTHONPATH=$PWD`` would.
"""

import sys
from pathlib import Path

_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)
