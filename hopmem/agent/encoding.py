"""Texts to the vectors the memory stores: encoded, checked and centred, in batches for many.

Every vector that enters an agent memory passes :func:`encode`: the encoder's
output must be ``(len(texts), dim)`` and finite, or nothing is written. A
file's vector space is its encoder (:func:`encoder_record`) and its centring
mean (:func:`space_centerer`), recorded when the file is made and when it is
re-embedded. Long
runs (:meth:`~hopmem.agent.AgentMemory.remember_many`,
:meth:`~hopmem.agent.AgentMemory.reembed`) go through :func:`encode_batches`,
which bounds what one encoder call holds and shows a progress bar.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from ..centering import Centerer
from ..encoders import Encoder, encoder_dim
from ..errors import InvalidInput

#: Texts per encoder call in :func:`encode_batches` (bounds the memory one call holds).
ENCODE_BATCH = 256
#: :func:`encode_batches` shows a progress bar from this many texts on (on a terminal).
PROGRESS_FROM = 1000


def encode(encoder: Encoder, centerer: Centerer | None, dim: int, texts: Sequence[str]) -> np.ndarray:
    """``texts`` encoded and centred (raw with ``centerer=None``), ``(len(texts), dim)`` float32;
    :class:`InvalidInput` if the encoder returns another shape or a non-finite value."""
    raw = np.asarray(encoder.encode(list(texts)), dtype=np.float32)
    if raw.shape != (len(texts), dim) or not np.isfinite(raw).all():
        raise InvalidInput(f"encoder returned shape {raw.shape} or non-finite values for {len(texts)} texts "
                           f"(expected ({len(texts)}, {dim}), finite)")
    return raw if centerer is None else np.atleast_2d(centerer.transform(raw))


def encode_batches(encoder: Encoder, centerer: Centerer, dim: int, texts: Sequence[str], *,
                   progress: bool | None = None, desc: str = "encoding") -> np.ndarray:
    """:func:`encode` over ``texts`` in batches of :data:`ENCODE_BATCH`.

    ``progress``: True or False forces the bar on or off; None (the default) leaves it to tqdm (shown on a
    terminal) from :data:`PROGRESS_FROM` texts on.
    """
    if not texts:
        return np.zeros((0, dim), np.float32)
    if len(texts) <= ENCODE_BATCH and not progress:  # one call, no bar: the recall path, kept direct
        return encode(encoder, centerer, dim, texts)
    disable = (None if len(texts) >= PROGRESS_FROM else True) if progress is None else not progress
    parts = []
    with tqdm(total=len(texts), desc=desc, unit="text", disable=disable) as bar:
        for start in range(0, len(texts), ENCODE_BATCH):
            parts.append(encode(encoder, centerer, dim, texts[start:start + ENCODE_BATCH]))
            bar.update(len(parts[-1]))
    return np.concatenate(parts)


def centerer_reference_texts() -> list[str]:
    """The reference texts bundled with hopmem that fit a new file's centring mean."""
    data = json.loads((Path(__file__).resolve().parents[1] / "data" / "conversation.json").read_text(encoding="utf-8"))
    texts = [s["text"] for s in data.get("statements", [])]
    texts += [q["question"] for q in data.get("related", [])]
    texts += list(data.get("unrelated", []))
    return texts


def is_encoder(encoder: object) -> bool:
    """Whether ``encoder`` has what the memory uses: ``encode``, ``fingerprint`` and its vectors' length
    (``dim``, or ``dimension``)."""
    return (encoder is not None and hasattr(encoder, "encode") and hasattr(encoder, "fingerprint")
            and (hasattr(encoder, "dim") or hasattr(encoder, "dimension")))


def encoder_record(encoder: Encoder) -> dict[str, Any]:
    """What a file records of its encoder: name, dimension and fingerprint."""
    return {"name": str(getattr(encoder, "name", type(encoder).__name__)), "dimension": encoder_dim(encoder),
            "fingerprint": str(encoder.fingerprint)}


def space_centerer(encoder: Encoder, dim: int, centerer: Centerer | None = None) -> Centerer:
    """The frozen centring mean for a new vector space: ``centerer`` (it must be fitted, of dimension ``dim``),
    or one fitted on :func:`centerer_reference_texts` encoded (checked) by ``encoder``."""
    if centerer is None:
        centerer = Centerer(dim).fit(encode(encoder, None, dim, centerer_reference_texts()))
    if not isinstance(centerer, Centerer) or not centerer.fitted or centerer.dim != dim:
        raise InvalidInput(f"centerer: expected a fitted Centerer of dimension {dim}")
    return centerer if centerer.frozen else Centerer.from_dict(centerer.to_dict()).freeze()
