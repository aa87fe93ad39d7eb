"""LoCoMo turn-level evidence retrieval: the agent memory on long, real two-person conversations.

The data (the LoCoMo release, licensed CC BY-NC 4.0) stays out of this
repository: every script here takes the LoCoMo data folder as an argument.
``python -m benchmarks.locomo.run DATA_DIR`` measures the agent memory with its
defaults and the BM25 / dense / fusion baselines on the same units
(docs/locomo.md); ``latency`` and ``encode_time`` time recall and the
encoders; ``fit_defaults`` and ``fit_reranker`` refit the shipped verdict and
reranker. The design studies that reuse this harness are in ``research/locomo``.
"""
