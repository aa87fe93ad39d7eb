"""Controlled, bounded labels: ``dict[str, list[str]]``.

A :class:`LabelPolicy` says which keys exist, which values each key allows
(``None``: any value), and how many values a key may carry. Keys and values are
normalized (trimmed, lowercased, inner whitespace collapsed), duplicates
collapse, and order is kept.

Two uses, two strictnesses:

* **explicit** labels (given by the caller on ``remember`` or ``recall``) are
  validated: an unknown key, a value outside the allowed set or too many values
  is an :class:`~hopmem.errors.InvalidInput`. On recall they *filter*.
* **inferred** labels (from an optional labeler) are cleaned: what the policy
  does not allow is dropped silently and the per-key limit truncates. They only
  *boost* ranking, because a labeler's mistake must never make a relevant
  entry unreachable.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import InvalidInput

__all__ = ["LabelPolicy", "Labels", "Labeler", "merge_labels", "labels_match", "labels_overlap"]

Labels = dict[str, list[str]]
#: A labeler: text in, labels out. It may raise; the write is kept unlabelled.
Labeler = Callable[[str], Mapping[str, Any]]


def _norm(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise InvalidInput(f"{what}: expected a str, got {type(value).__name__} {value!r}")
    out = " ".join(value.strip().lower().split())
    if not out:
        raise InvalidInput(f"{what}: expected a non-empty string, got {value!r}")
    if len(out) > 64:
        raise InvalidInput(f"{what}: expected at most 64 characters, got {len(out)}")
    return out


@dataclass(frozen=True)
class LabelPolicy:
    """Which labels may exist.

    Parameters
    ----------
    allowed : mapping of str to iterable of str or None, optional
        Allowed keys and, for each, its allowed values (``None``: any value).
        ``None`` (the default) allows any key.
    max_values_per_key : int, optional
        At most this many values per key (default 8).
    max_keys : int, optional
        At most this many keys per entry (default 8).
    """

    allowed: Mapping[str, Iterable[str] | None] | None = None
    max_values_per_key: int = 8
    max_keys: int = 8
    _allowed: dict[str, frozenset[str] | None] | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for name in ("max_values_per_key", "max_keys"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidInput(f"{name}: expected an int >= 1, got {value!r}")
        if self.allowed is None:
            return
        if not isinstance(self.allowed, Mapping):
            raise InvalidInput(f"allowed: expected a mapping of key to values, got {type(self.allowed).__name__}")
        table: dict[str, frozenset[str] | None] = {}
        for key, values in self.allowed.items():
            nkey = _norm(key, "label key")
            table[nkey] = None if values is None else frozenset(_norm(v, f"label value of {nkey!r}") for v in values)
        object.__setattr__(self, "_allowed", table)

    @property
    def allowed_values(self) -> Mapping[str, frozenset[str] | None] | None:
        """The allowed keys, normalized, each with its allowed values (``None``: any value); ``None`` when
        any key is allowed. What :attr:`allowed` says, as checked (for example to describe labels in a
        tool's schema)."""
        return None if self._allowed is None else dict(self._allowed)

    def _check_key(self, key: str, strict: bool) -> bool:
        if self._allowed is None or key in self._allowed:
            return True
        if strict:
            raise InvalidInput(f"label key {key!r} is not allowed; allowed keys: {sorted(self._allowed)}")
        return False

    def _check_value(self, key: str, value: str, strict: bool) -> bool:
        if self._allowed is None:
            return True
        values = self._allowed.get(key)
        if values is None or value in values:
            return True
        if strict:
            raise InvalidInput(f"label value {value!r} is not allowed for key {key!r}; allowed: {sorted(values)}")
        return False

    def normalize(self, labels: Mapping[str, Any] | None, *, strict: bool = True) -> Labels:
        """Validate (``strict``) or clean (not ``strict``) a labels mapping.

        A value may be a str or a list of str. Returns a new dict with
        normalized keys and de-duplicated values in order.
        """
        if labels is None:
            return {}
        if not isinstance(labels, Mapping):
            if strict:
                raise InvalidInput(f"labels: expected a dict[str, list[str]], got {type(labels).__name__}")
            return {}
        out: Labels = {}
        for raw_key, raw_values in labels.items():
            try:
                key = _norm(raw_key, "label key")
                if not self._check_key(key, strict):
                    continue
                values = [raw_values] if isinstance(raw_values, str) else raw_values
                if not isinstance(values, (list, tuple, set, frozenset)):
                    raise InvalidInput(
                        f"labels[{key!r}]: expected a str or a list of str, got {type(raw_values).__name__}")
                kept: dict[str, None] = {}
                for raw in values:
                    value = _norm(raw, f"labels[{key!r}]")
                    if self._check_value(key, value, strict):
                        kept.setdefault(value, None)
            except InvalidInput:
                if strict:
                    raise
                continue
            if len(kept) > self.max_values_per_key:
                if strict:
                    raise InvalidInput(
                        f"labels[{key!r}]: at most {self.max_values_per_key} values, got {len(kept)}")
                kept = dict.fromkeys(list(kept)[: self.max_values_per_key])
            if kept:
                out.setdefault(key, [])
                for value in kept:
                    if value not in out[key]:
                        out[key].append(value)
        if len(out) > self.max_keys:
            if strict:
                raise InvalidInput(f"labels: at most {self.max_keys} keys, got {len(out)}")
            out = dict(list(out.items())[: self.max_keys])
        return out

    def merge(self, a: Mapping[str, list[str]], b: Mapping[str, list[str]]) -> Labels:
        """Union of two normalized label sets, bounded by the policy (first come, first kept)."""
        merged = merge_labels(a, b)
        return self.normalize(merged, strict=False)


def merge_labels(a: Mapping[str, list[str]], b: Mapping[str, list[str]]) -> Labels:
    """Union of two label dicts, values de-duplicated in order."""
    out: Labels = {k: list(v) for k, v in a.items()}
    for key, values in b.items():
        bucket = out.setdefault(key, [])
        for value in values:
            if value not in bucket:
                bucket.append(value)
    return out


def labels_match(entry: Mapping[str, list[str]], wanted: Mapping[str, list[str]]) -> bool:
    """Filter rule: for every wanted key, the entry has at least one of its values."""
    for key, values in wanted.items():
        have = entry.get(key)
        if not have or not any(v in have for v in values):
            return False
    return True


def labels_overlap(a: Mapping[str, list[str]], b: Mapping[str, list[str]]) -> int:
    """How many (key, value) pairs two label sets share."""
    return sum(1 for key, values in a.items() for v in values if v in b.get(key, ()))
