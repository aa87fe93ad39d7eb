"""LoCoMo turn-level evidence retrieval: the agent memory on long, real two-person conversations.

The data (the LoCoMo release, licensed CC BY-NC 4.0) stays out of this
repository: every script here takes the LoCoMo data folder as an argument.
``python -m benchmarks.locomo.run DATA_DIR`` measures the agent memory with its
defaults and the BM25 / dense / fusion baselines on the same units;
``study_verdict``, ``study_multihop`` and ``study_dedup`` are the design study
behind the verdict, associative multi-hop and chat dedup (docs/locomo.md).
"""
