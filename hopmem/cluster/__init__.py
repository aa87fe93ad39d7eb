"""hopmem beyond one machine: placement of collections on shards, partitioned collections.

Importing this package imports nothing from Ray: the Ray parts load only when
used, and :mod:`hopmem.cluster.partitions` (stable placement, partitioned
collections over any collection-like objects) needs no Ray at all.
"""

from __future__ import annotations

__all__: list[str] = []
