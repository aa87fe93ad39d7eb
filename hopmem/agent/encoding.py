"""Texts to the vectors the memory stores: encoded, checked and centered, in batches for many.

Every vector that enters an agent memory passes :func:`encode`: the encoder's
output must be ``(len(texts), dim)`` and finite, or nothing is written. A
file's vector space is its encoder (:func:`encoder_record`) and its centering
mean (:func:`space_centerer`), recorded when the file is made and when it is
re-embedded. Long
runs (:meth:`~hopmem.agent.AgentMemory.remember_many`,
:meth:`~hopmem.agent.AgentMemory.reembed`) go through :func:`encode_batches`,
which bounds what one encoder call holds and shows a progress bar.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from ..errors import InvalidInput
from ..text.centering import Centerer
from ..text.encoders import Encoder, encoder_dim

logger = logging.getLogger(__name__)

#: Folder of shipped centering means: ``<encoder fingerprint>.json`` per encoder (see :func:`shipped_centerer`).
CENTERING_DIR = Path(__file__).resolve().parents[1] / "data" / "centering"
_SHIPPED_FORMAT = "hopmem.shipped-centerer"

#: Texts per encoder call in :func:`encode_batches` (bounds the memory one call holds).
ENCODE_BATCH = 256
#: :func:`encode_batches` shows a progress bar from this many texts on (on a terminal).
PROGRESS_FROM = 1000


def encode(encoder: Encoder, centerer: Centerer | None, dim: int, texts: Sequence[str]) -> np.ndarray:
    """``texts`` encoded and centered (raw with ``centerer=None``), ``(len(texts), dim)`` float32;
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
    # Texts of like length share a call: a model encoder pads a batch to its longest text, so mixing
    # lengths costs it (about 10% on chat turns). The vectors go back in the texts' order.
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    out = np.empty((len(texts), dim), dtype=np.float32)
    with tqdm(total=len(texts), desc=desc, unit="text", disable=disable) as bar:
        for start in range(0, len(texts), ENCODE_BATCH):
            chunk = order[start:start + ENCODE_BATCH]
            out[chunk] = encode(encoder, centerer, dim, [texts[i] for i in chunk])
            bar.update(len(chunk))
    return out


def centerer_reference_texts() -> list[str]:
    """The reference texts bundled with hopmem that fit a new file's centering mean."""
    data = json.loads((Path(__file__).resolve().parents[1] / "data" / "conversation.json").read_text(encoding="utf-8"))
    texts = [s["text"] for s in data.get("statements", [])]
    texts += [q["question"] for q in data.get("related", [])]
    texts += list(data.get("unrelated", []))
    return texts


def reference_texts_digest(texts: Sequence[str] | None = None) -> str:
    """sha256 of the reference texts (:func:`centerer_reference_texts` by default), in order: a shipped
    mean is only used while the texts it was fitted on are the bundled ones."""
    texts = centerer_reference_texts() if texts is None else list(texts)
    return hashlib.sha256(json.dumps(texts, ensure_ascii=False).encode("utf-8")).hexdigest()


def fit_space_centerer(encoder: Encoder, dim: int) -> Centerer:
    """The frozen mean fitted on :func:`centerer_reference_texts` encoded (checked) by ``encoder``: what
    :func:`space_centerer` computes when no shipped mean matches the encoder."""
    fitted = Centerer(dim).fit(encode(encoder, None, dim, centerer_reference_texts()))
    return Centerer.from_dict(fitted.to_dict()).freeze()


def shipped_record(encoder: Encoder, centerer: Centerer) -> dict[str, Any]:
    """The JSON that ships ``centerer`` (fitted by :func:`fit_space_centerer`) for ``encoder``'s fingerprint."""
    return {"format": _SHIPPED_FORMAT, "version": 1, "encoder": encoder_record(encoder),
            "reference_texts_sha256": reference_texts_digest(), "centerer": centerer.to_dict()}


def shipped_centerer(fingerprint: str, dim: int, directory: Path | None = None) -> Centerer | None:
    """The centering mean shipped for the encoder ``fingerprint`` (in ``directory``, :data:`CENTERING_DIR` by
    default), frozen; None when none is shipped, or the one shipped is for another dimension or other
    reference texts (then the mean is computed, as for any encoder)."""
    path = (CENTERING_DIR if directory is None else directory) / f"{fingerprint}.json"
    if not fingerprint.isalnum() or not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if (data.get("format") != _SHIPPED_FORMAT or data["encoder"]["fingerprint"] != fingerprint
                or data["encoder"]["dimension"] != dim
                or data["reference_texts_sha256"] != reference_texts_digest()):
            logger.warning("shipped centering mean %s does not match this encoder or the bundled texts; "
                           "computing the mean instead", path)
            return None
        centerer = Centerer.from_dict(data["centerer"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        logger.warning("could not read the shipped centering mean %s (%s); computing the mean instead", path, exc)
        return None
    if not centerer.fitted or centerer.dim != dim:
        return None
    return centerer if centerer.frozen else centerer.freeze()


def is_encoder(encoder: object) -> bool:
    """Whether ``encoder`` has what the memory uses: ``encode``, ``fingerprint`` and its vectors' length
    (``dim``, or ``dimension``)."""
    return (encoder is not None and hasattr(encoder, "encode") and hasattr(encoder, "fingerprint")
            and (hasattr(encoder, "dim") or hasattr(encoder, "dimension")))


def encoder_record(encoder: Encoder) -> dict[str, Any]:
    """What a file records of its encoder: name, dimension and fingerprint."""
    return {"name": str(getattr(encoder, "name", type(encoder).__name__)), "dimension": encoder_dim(encoder),
            "fingerprint": fp if isinstance(fp := encoder.fingerprint, str) else str(fp)}  # keeps legacy aliases


def space_centerer(encoder: Encoder, dim: int, centerer: Centerer | None = None) -> Centerer:
    """The frozen centering mean for a new vector space: ``centerer`` (it must be fitted, of dimension ``dim``),
    else the mean shipped for ``encoder``'s fingerprint (:func:`shipped_centerer`: no encoding at all), else
    one fitted on :func:`centerer_reference_texts` encoded (checked) by ``encoder``
    (:func:`fit_space_centerer`).

    A shipped mean is the one :func:`fit_space_centerer` gives for that encoder (the script
    ``benchmarks/centering_means.py`` writes it, and a test refits it), bit for bit where it was made; it
    saves encoding the few hundred reference texts on every new file."""
    if centerer is None:
        centerer = shipped_centerer(str(encoder.fingerprint), dim)
        if centerer is None:
            centerer = fit_space_centerer(encoder, dim)
    if not isinstance(centerer, Centerer) or not centerer.fitted or centerer.dim != dim:
        raise InvalidInput(f"centerer: expected a fitted Centerer of dimension {dim}")
    return centerer if centerer.frozen else Centerer.from_dict(centerer.to_dict()).freeze()
