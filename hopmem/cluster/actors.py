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

from ..errors import InvalidInput, StoreError
from .catalog import Catalog
from .host import ShardHost
from .replication import Pending
from .wire import Envelope, answer, pack_error, unpack_error

__all__ = ["CatalogActor", "HostActor"]


@ray.remote
class CatalogActor:
    def __init__(self, path: str) -> None:
        self._impl = Catalog(path)

    def invoke(self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Envelope:
        return answer(getattr(self._impl, method), *args, **kwargs)

    def node_id(self) -> str:
        """The Ray node this catalog runs on (the head, where ``connect`` creates it)."""
        return str(ray.get_runtime_context().get_node_id())


#: What one host asks another: journal entries to apply, its journal position, a chunk of a
#: copy, installing it, and whether it answers at all.
REPLICATION_CALLS = frozenset({"apply_entries", "log_position", "receive_chunk", "install",
                               "pid"})


class RayPeers:
    """A host's calls to other hosts (their ``replicate``) and to the catalog, through Ray."""

    def __init__(self, namespace: str, catalog_name: str, host_name: Any) -> None:
        self._namespace = namespace
        self._catalog_name = catalog_name
        self._host_name = host_name
        self._handles: dict[str, Any] = {}

    def _handle(self, name: str) -> Any:
        handle = self._handles.get(name)
        if handle is None:
            handle = self._handles[name] = ray.get_actor(name, namespace=self._namespace)
        return handle

    def replicate(self, host_id: str, method: str, args: tuple[Any, ...],
                  timeout: float) -> Envelope:
        return self.send(host_id, method, args)(timeout)

    def send(self, host_id: str, method: str, args: tuple[Any, ...]) -> Pending:
        name = self._host_name(host_id)

        def failed(exc: BaseException) -> Envelope:
            self._handles.pop(name, None)
            return False, pack_error(StoreError(f"host {host_id}: {type(exc).__name__}"))

        try:
            ref = self._handle(name).replicate.remote(method, args)
        except Exception as exc:  # noqa: BLE001 - gone or unknown: it failed
            envelope = failed(exc)
            return lambda timeout: envelope

        def wait(timeout: float) -> Envelope:
            try:
                answer: Envelope = ray.get(ref, timeout=timeout)
                return answer
            except Exception as exc:  # noqa: BLE001 - gone, unschedulable, timed out: it failed
                return failed(exc)
        return wait

    def catalog(self, method: str, *args: Any) -> Any:
        ok, value = ray.get(self._handle(self._catalog_name).invoke.remote(method, args, {}),
                            timeout=30.0)
        if not ok:
            raise unpack_error(value)
        return value


@ray.remote(concurrency_groups={"replication": 16})  # type: ignore[call-overload]
class HostActor:
    def __init__(self, host_id: str, root: str, options: dict[str, Any],
                 namespace: str = "hopmem", catalog: str = "hopmem-catalog") -> None:
        self._impl = ShardHost(host_id, root, **options)
        self._impl.replication.peers = RayPeers(namespace, catalog,
                                                lambda h: f"hopmem-host-{h}")

    def invoke(self, method: str, args: tuple[Any, ...]) -> Envelope:
        return answer(getattr(self._impl, method), *args)

    def many(self, calls: Sequence[tuple[str, tuple[Any, ...]]]) -> list[Envelope]:
        return [answer(getattr(self._impl, method), *args) for method, args in calls]

    @ray.method(concurrency_group="replication")
    def replicate(self, method: str, args: tuple[Any, ...]) -> Envelope:
        """A call from another host, in a thread pool of its own: a leader's forwarding never
        waits behind client calls that may themselves wait on forwarding (no deadlock)."""
        if method not in REPLICATION_CALLS:
            return False, pack_error(InvalidInput(f"method: expected one of "
                                                  f"{sorted(REPLICATION_CALLS)}, got {method!r}"))
        return answer(getattr(self._impl, method), *args)
