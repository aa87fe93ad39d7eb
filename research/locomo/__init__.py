"""The design studies on LoCoMo behind the agent memory's verdict, ranking and dedup (docs/research/locomo-studies.md).

Each ``study_*`` script takes the LoCoMo data folder as an argument and reuses
the evaluation harness in :mod:`benchmarks.locomo` (data, cache, metrics,
baselines); ``signals`` and ``probes`` collect the per-question signals the
verdict studies compare.
"""
