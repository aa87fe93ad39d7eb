"""The asv quality tracks (``research/asv.conf.json``): capacity, basins, forgetting, abstention AUC.

asv imports this folder as a package of its own; the repository root goes on
the path here, so the suite imports ``research.experiments`` and the working
tree's hopmem by their full names.
"""

import sys
from pathlib import Path

_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)
