"""The text layer: encoders, centering, gates, recall and text collections over the engine.

- :mod:`hopmem.text.encoders` (and :mod:`hopmem.text.onnx_export`,
  :mod:`hopmem.text.model_files`): text to vectors.
- :mod:`hopmem.text.centering`: the corpus-mean :class:`~hopmem.text.centering.Centerer`.
- :mod:`hopmem.text.gates`, :mod:`hopmem.text.recall`: calibrated abstention and recall.
- :mod:`hopmem.text.collection`: :class:`~hopmem.text.collection.TextCollection`.
"""

from __future__ import annotations

from .collection import CENTERING_FORMAT, MIN_FIT, PreparedVectors, StoreCollection, TextCollection

__all__ = ["CENTERING_FORMAT", "MIN_FIT", "PreparedVectors", "StoreCollection", "TextCollection"]
