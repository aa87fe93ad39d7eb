"""Write (or check) the English word-frequency table hopmem ships for its agent layer.

:mod:`hopmem.agent.english` weighs a query's words by how common they are in
English. It reads ``hopmem/data/english-zipf.xz``: the CRC-32 of each word of
wordfreq's "large" English list (321,000 words), sorted and delta-coded as
little-endian uint32, followed by each word's Zipf frequency in hundredths as
little-endian int16, xz-compressed (about 1 MB, against wordfreq's 58 MB
install). ``english-zipf.json`` beside it records the count, the sha256 of the
uncompressed payload, the wordfreq version and the data's licence.

wordfreq (the ``bench`` extra) is needed only here, to build or check the table:

    .venv/bin/python -m benchmarks.english_table          # write
    .venv/bin/python -m benchmarks.english_table --check  # rebuild and compare with the shipped files

The word list's data is by Robyn Speer and contributors (wordfreq), under the
Creative Commons Attribution-ShareAlike 4.0 licence; so is the table derived from it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import lzma
import sys
import zlib
from importlib import metadata

import numpy as np

from hopmem.agent.english import DATA_DIR, PAYLOAD, RECORD


def build() -> tuple[bytes, dict[str, object]]:
    """(the uncompressed payload, its record) from the installed wordfreq."""
    from wordfreq import get_frequency_list

    # the list's bins, most frequent first: bin i holds the words of frequency 10 ** (-i / 100), Zipf 9 - i / 100.
    bins = get_frequency_list.__wrapped__("en", "large")  # __wrapped__: wordfreq would cache ~80 MB
    keys = np.fromiter((zlib.crc32(w.encode("utf-8")) for words in bins for w in words), dtype=np.uint32)
    values = np.concatenate([np.full(len(words), 900 - i) for i, words in enumerate(bins)])
    order = np.argsort(keys, kind="stable")
    keys, values = keys[order], values[order].astype("<i2")
    deltas = np.diff(keys, prepend=np.uint32(0)).astype("<u4")
    payload = deltas.tobytes() + values.tobytes()
    record = {
        "format": "hopmem-english-zipf", "version": 1, "count": int(len(keys)),
        "payload_sha256": hashlib.sha256(payload).hexdigest(),
        "source": f"wordfreq {metadata.version('wordfreq')}, get_frequency_list('en', 'large')",
        "licence": "CC-BY-SA-4.0 (the word list's data: Robyn Speer and contributors, wordfreq)",
    }
    return payload, record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="rebuild and compare with the shipped files")
    args = parser.parse_args(argv)
    payload, record = build()
    if args.check:
        shipped = json.loads((DATA_DIR / RECORD).read_text(encoding="utf-8"))
        same = lzma.decompress((DATA_DIR / PAYLOAD).read_bytes()) == payload
        keys = ("count", "payload_sha256")
        if not same or any(shipped[k] != record[k] for k in keys):
            print(f"english_table: the shipped table differs from a rebuild with {record['source']}: rerun "
                  "python -m benchmarks.english_table", file=sys.stderr)
            return 1
        print(f"english_table: the shipped table equals a rebuild ({record['count']} words)")
        return 0
    (DATA_DIR / PAYLOAD).write_bytes(lzma.compress(payload, preset=9 | lzma.PRESET_EXTREME))
    (DATA_DIR / RECORD).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    print(f"english_table: wrote {DATA_DIR / PAYLOAD} ({record['count']} words)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
