"""How common a word is in English: its Zipf frequency, from a table shipped with the package.

The Zipf frequency of a word is ``log10`` of how often it occurs per billion
words: about 7.7 for "the", 5.2 for "moment", 3.7 for "renovation", and 0
here for a word the table does not hold. :func:`novelty
<hopmem.agent.evidence.novelty>` can weigh a query's words by it, so an
everyday word the memory never stored counts for less than a specific one.

The table is wordfreq's "large" English list (321,000 words; its data by
Robyn Speer and contributors, under CC BY-SA 4.0), kept compact in
``hopmem/data/english-zipf.xz`` (about 1 MB): the CRC-32 of each word, sorted,
with its Zipf value in hundredths. It is loaded once (:func:`preload`, or the
first use). Two words with one CRC-32 would share a value; among the list's
words the few such pairs are all rare, and a rare word's value is near 0
either way. ``python -m benchmarks.english_table`` rebuilds the file from
wordfreq (``--check`` compares).
"""

from __future__ import annotations

import array
import bisect
import functools
import hashlib
import json
import lzma
import zlib
from pathlib import Path

import numpy as np

__all__ = ["preload", "zipf"]

DATA_DIR = Path(__file__).resolve().parents[1] / "data"
PAYLOAD = "english-zipf.xz"
RECORD = "english-zipf.json"


@functools.cache
def _table() -> tuple[array.array, array.array]:
    record = json.loads((DATA_DIR / RECORD).read_text(encoding="utf-8"))
    payload = lzma.decompress((DATA_DIR / PAYLOAD).read_bytes())
    if hashlib.sha256(payload).hexdigest() != record["payload_sha256"]:
        raise RuntimeError(f"{DATA_DIR / PAYLOAD} is damaged (its sha256 differs from {RECORD}'s): reinstall hopmem")
    n = int(record["count"])
    keys = np.cumsum(np.frombuffer(payload, dtype="<u4", count=n), dtype=np.uint32)
    values = np.frombuffer(payload, dtype="<i2", count=n, offset=4 * n)
    # array.array: bisect on it is a C loop, ~1 us a lookup (numpy's searchsorted on one scalar: ~50 us)
    return array.array("I", keys.astype(np.uint32).tobytes()), array.array("h", values.astype(np.int16).tobytes())


def preload() -> None:
    """Load the table now (once per process, a few tens of milliseconds) rather than at first use."""
    _table()


@functools.lru_cache(maxsize=1 << 16)  # recall asks for a query's words every time; the table never changes
def zipf(word: str) -> float:
    """The Zipf frequency of a lowercase ``word`` in English (0.0 when the table lacks it)."""
    keys, values = _table()
    key = zlib.crc32(word.encode("utf-8"))
    j = bisect.bisect_left(keys, key)
    return values[j] / 100.0 if j < len(keys) and keys[j] == key else 0.0

