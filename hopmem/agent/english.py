"""How common a word is in English: its Zipf frequency, from wordfreq's English word list.

The Zipf frequency of a word is ``log10`` of how often it occurs per billion
words: about 7.7 for "the", 5.2 for "moment", 3.7 for "renovation", and 0
here for a word the list does not hold. :func:`novelty
<hopmem.agent.evidence.novelty>` can weigh a query's words by it, so an
everyday word the memory never stored counts for less than a specific one.

The list is wordfreq's "large" English list (321,000 words). It is loaded
once (:func:`preload`, or the first use), and kept compact: the CRC-32 of
each word, sorted, with its Zipf value in hundredths (about 2 MB, against
37 MB as a ``dict``). Two
words with one CRC-32 would share a value; among the list's words the few
such pairs are all rare, and a rare word's value is near 0 either way.
"""

from __future__ import annotations

import array
import bisect
import functools
import zlib

import numpy as np

__all__ = ["preload", "zipf"]


@functools.cache
def _table() -> tuple[array.array, array.array]:
    from wordfreq import get_frequency_list

    # the list's bins, most frequent first: bin i holds the words of frequency 10 ** (-i / 100), Zipf 9 - i / 100.
    # __wrapped__: wordfreq would otherwise cache the whole list (about 80 MB) for the life of the process.
    bins = get_frequency_list.__wrapped__("en", "large")
    keys = np.fromiter((zlib.crc32(w.encode("utf-8")) for words in bins for w in words), dtype=np.uint32)
    values = np.concatenate([np.full(len(words), 900 - i) for i, words in enumerate(bins)])
    order = np.argsort(keys, kind="stable")
    # array.array: bisect on it is a C loop, ~1 us a lookup (numpy's searchsorted on one scalar: ~50 us)
    return array.array("I", keys[order].tobytes()), array.array("h", values[order].astype(np.int16).tobytes())


def preload() -> None:
    """Load the word list now (once per process, about half a second) rather than at first use."""
    _table()


def zipf(word: str) -> float:
    """The Zipf frequency of a lowercase ``word`` in English (0.0 when the list lacks it)."""
    keys, values = _table()
    key = zlib.crc32(word.encode("utf-8"))
    j = bisect.bisect_left(keys, key)
    return values[j] / 100.0 if j < len(keys) and keys[j] == key else 0.0
