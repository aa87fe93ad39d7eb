"""The Ray actors: the catalog and the shard hosts (imports Ray; loaded only by the runtime).

Both wrap a plain object (:class:`~hopmem.cluster.catalog.Catalog`,
:class:`~hopmem.cluster.host.ShardHost`) and answer every call as an envelope
(:mod:`hopmem.cluster.wire`), so no exception ever leaves an actor wrapped in
Ray's own error type.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import ray

from .catalog import Catalog
from .host import ShardHost
from .wire import Envelope, answer

__all__ = ["CatalogActor", "HostActor"]


@ray.remote
class CatalogActor:
    def __init__(self, path: str) -> None:
        self._impl = Catalog(path)

    def invoke(self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Envelope:
        return answer(getattr(self._impl, method), *args, **kwargs)


@ray.remote
class HostActor:
    def __init__(self, host_id: str, root: str, options: dict[str, Any]) -> None:
        self._impl = ShardHost(host_id, root, **options)

    def invoke(self, method: str, args: tuple[Any, ...]) -> Envelope:
        return answer(getattr(self._impl, method), *args)

    def many(self, calls: Sequence[tuple[str, tuple[Any, ...]]]) -> list[Envelope]:
        return [answer(getattr(self._impl, method), *args) for method, args in calls]
