"""Quality experiments: capacity, basins, interference, quantisation, abstention.

Each module is runnable on its own::

    python -m research.experiments.capacity [--quick] [--out DIR]

and writes its numbers as CSV and a PNG plot into ``--out`` (default
``results/experiments/``). The measuring functions are importable (the asv
suite ``research/asv/bench_quality.py``, the notebook and the tests reuse them);
importing a module runs nothing.
"""

try:
    import hopmem  # noqa: F401
except ImportError:  # not installed: use the working tree these experiments live in
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

EXPERIMENTS = ("capacity", "basins", "interference", "quantization", "abstention")
