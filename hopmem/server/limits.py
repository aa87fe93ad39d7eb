"""Bounds on what one request may ask for: the ``serve`` flags' values, in a module with no dependency beyond
the standard library, so that ``hopmem --help`` and the other subcommands work without the server extra."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Limits"]


@dataclass(frozen=True)
class Limits:
    """Bounds on what one request may ask for (flags of ``serve``)."""

    max_body_bytes: int = 2 * 1024 * 1024
    max_batch: int = 1000
    request_timeout: float = 30.0

    def __post_init__(self) -> None:
        if self.max_body_bytes < 1:
            raise ValueError(f"max_body_bytes: expected an integer >= 1, got {self.max_body_bytes!r}")
        if self.max_batch < 1:
            raise ValueError(f"max_batch: expected an integer >= 1, got {self.max_batch!r}")
        if not self.request_timeout > 0:
            raise ValueError(f"request_timeout: expected seconds > 0, got {self.request_timeout!r}")
