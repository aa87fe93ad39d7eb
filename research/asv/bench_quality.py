"""asv quality tracks: capacity, basin radius, forgetting half-life, abstention AUC.

Small, fast versions of the experiments in ``research/experiments`` (same
functions, smaller grids), so that a change in the engine that costs recall
shows up in ``asv compare`` next to the speed benchmarks. Each returns one
number with a ``unit``; they are deterministic for a given build (seeded).
"""

from __future__ import annotations

from threadpoolctl import threadpool_limits

# Kept referenced for the life of the process (as in bench_engine.py): one BLAS thread.
BLAS_LIMITS = threadpool_limits(limits=1)

from research.experiments import abstention, basins, capacity, interference  # noqa: E402


def track_capacity_90_plain_d64_beta5():
    """Items stored (d = 64, plain, beta = 5, iterative) at 90% recall; queries 60° off."""
    return capacity.capacity_at_90(d=64, mode="plain", beta=5.0, strategy="iterative",
                                   sizes=(16, 32, 64, 128, 256, 512, 1024), queries=64,
                                   angle_deg=60.0)


track_capacity_90_plain_d64_beta5.unit = "items"


def track_recall_competitive_d384_beta30():
    """Recall at 256 stored (d = 384, competitive, beta = 30, iterative), queries 30° off."""
    rows = capacity.recall_curves(dims=(384,), modes=("competitive",), betas=(30.0,), sizes=(256,),
                                  queries=128, angles_deg=(30.0,), strategies=("iterative",),
                                  progress=False)
    return rows[0]["recall"]


track_recall_competitive_d384_beta30.unit = "recall"


def track_basin_radius_plain_d128():
    """Largest query angle (degrees) keeping 90% recall: d = 128, 128 stored, plain, beta = 30."""
    return basins.basin_radius(d=128, n_stored=128, mode="plain", beta=30.0, strategy="iterative",
                               angles_deg=tuple(range(0, 91, 5)), queries=64)


track_basin_radius_plain_d128.unit = "degrees"


def track_basin_radius_competitive_d128():
    """The same for competitive mode (fast read, which is its better one at beta = 30)."""
    return basins.basin_radius(d=128, n_stored=128, mode="competitive", beta=30.0, strategy="fast",
                               angles_deg=tuple(range(0, 91, 5)), queries=64)


track_basin_radius_competitive_d128.unit = "degrees"


def track_forgetting_half_life_drifting():
    """Later writes (drifting towards a neighbour) until early recall halves; default schedule."""
    return interference.forgetting_half_life(stream="drifting", schedule="default", d=64,
                                             n_early=16)


track_forgetting_half_life_drifting.unit = "writes"


class AbstentionAUC:
    """AUC of first_contact, seen vs unseen, all-MiniLM-L6-v2, 24 stored statements.

    Skipped (NotImplementedError in setup) when the model is not installed.
    """

    params = ["unrelated", "held-out"]
    param_names = ["negatives"]
    timeout = 600  # the model load alone can take half a minute on a busy machine

    def setup_cache(self):
        encoder, _ = abstention.model_encoder()
        if encoder is None:
            return None
        rows, _ = abstention.abstention_scores(encoder, fillers=(0,), modes=("plain",),
                                               betas=(30.0,), progress=False)
        return {r["negatives"]: r["auc_first_contact"] for r in rows}

    def setup(self, cache, negatives):
        if cache is None:
            raise NotImplementedError("all-MiniLM-L6-v2 unavailable: pip install 'hopmem[text]'")

    def track_auc(self, cache, negatives):
        return cache[negatives]

    track_auc.unit = "AUC"
