"""Threads for the kernel's scans: :func:`set_threads` and :func:`get_threads`.

A scan of the address matrix (the block scoring inside a batch write, a read
over many locations, a batch of reads) splits its rows between the calling
thread and a few helper threads of the kernel. Each row's score is computed by
the same code on whichever thread takes it, so results are bit-equal for any
thread count; only the time changes.

The default is ``HOPMEM_THREADS`` when set, else the CPUs this process may run
on, at most 4. Small scans stay on the calling thread (waking a helper costs
about what it saves), and only one scan at a time uses the helpers: a scan that
finds them busy (another thread's read) runs alone, so concurrent readers never
wait for each other. ``set_threads(1)`` turns the helpers off.
"""

from __future__ import annotations

import os

from ..errors import InvalidConfig, InvalidInput
from . import _kernel

__all__ = ["set_threads", "get_threads", "default_threads", "usable_cpus", "MAX_THREADS", "MAX_DEFAULT"]

MAX_THREADS: int = _kernel.MAX_THREADS
"""The most threads a scan may use (the kernel's HM_MAX_THREADS)."""

MAX_DEFAULT = 4
"""The default never exceeds this: blocks of a few hundred rows gain little beyond it."""


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def default_threads() -> int:
    """``HOPMEM_THREADS`` if set (1 to 16), else the usable CPUs, at most 4."""
    raw = os.environ.get("HOPMEM_THREADS", "").strip()
    if raw:
        try:
            n = int(raw)
        except ValueError:
            n = 0
        if not 1 <= n <= MAX_THREADS:
            raise InvalidConfig(f"HOPMEM_THREADS: expected an integer from 1 to {MAX_THREADS}, "
                                f"got {raw!r}")
        return n
    return max(1, min(MAX_DEFAULT, usable_cpus()))


def set_threads(n: int | None = None) -> int:
    """Let scans use ``n`` threads, the caller's included; None: the default. Returns ``n``.

    Applies process-wide, to every memory and collection, from the next scan on.
    """
    if n is None:
        n = default_threads()
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_THREADS:
        raise InvalidInput(f"threads: expected an integer from 1 to {MAX_THREADS}, got {n!r}")
    return int(_kernel.set_threads(n))


def get_threads() -> int:
    """Threads a scan may use now, the caller's included."""
    return int(_kernel.get_threads())


set_threads()
