"""hopmem's benchmarks: runnable scripts here, asv suites in ``asv/``, evaluation data in ``data/``.

See benchmarks/README.md for what is where and how to run each.
"""

