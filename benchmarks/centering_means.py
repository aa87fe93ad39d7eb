"""Write (or check) the centering means hopmem ships for its built-in encoders.

A new agent memory fits its centering mean on the reference texts bundled in
``hopmem/data/conversation.json`` (``hopmem.agent.encoding.centerer_reference_texts``).
Encoding those few hundred texts is most of what opening a new file costs, so
hopmem ships the fitted mean for the encoders it knows, one file per encoder
fingerprint under ``hopmem/data/centering/``, and uses it when the encoder's
fingerprint matches. This script fits each mean exactly as an open does
(``fit_space_centerer``) and writes the file; ``--check`` refits and fails
unless the shipped file is identical. Rerun it whenever the reference texts,
the Centerer or a built-in encoder change:

    .venv/bin/python -m benchmarks.centering_means          # write
    .venv/bin/python -m benchmarks.centering_means --check  # verify

The MiniLM encoders are the default ``SentenceTransformerEncoder()`` (torch,
batch size 64) and ``OnnxEncoder()`` with and without ``quantize="int8"``; the
hashing encoder is ``HashingEncoder()`` with its defaults.

A model encoder's fingerprint names the model, not its rounded outputs, so it
is the same with any thread count, while the last bits of the vectors (and so
of the mean) may not be: the files are written with one thread
(``OMP_NUM_THREADS=1``, what ``make`` and the tests use), and ``--check``
compares them under the same setting. The last bits also depend on the CPU's
kernels (torch's differ between processors), so ``--check`` compares the mean
and the running sum as numbers, within the tolerance of an encoder's floats
(:func:`benchmarks.provenance.compare`), and checks the shipped fingerprint
against the shipped mean instead of against the refit's. Each file's
``provenance`` names this command and the commit it was fitted at
(``reference_texts_sha256`` is the hash of its data); ``--check`` compares
all but that commit, and a write that changes nothing keeps it. The shipped
mean is the encoder's mean to float rounding on any machine, and a store
records the mean it was given, so nothing depends on those bits.
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
from collections.abc import Callable

import numpy as np

from benchmarks.provenance import check_text, compare, refit_text
from hopmem.agent.encoding import CENTERING_DIR, fit_space_centerer, shipped_record
from hopmem.text.centering import Centerer
from hopmem.text.encoders import Encoder, HashingEncoder, OnnxEncoder, SentenceTransformerEncoder, encoder_dim


def _minilm() -> Encoder:
    return SentenceTransformerEncoder()


def _minilm_onnx() -> Encoder:
    return OnnxEncoder()


def _minilm_onnx_int8() -> Encoder:
    return OnnxEncoder(quantize="int8")


#: The command a shipped file's provenance names.
COMMAND = "python -m benchmarks.centering_means"

#: The encoders whose mean is shipped, by a short label.
ENCODERS: dict[str, Callable[[], Encoder]] = {"minilm": _minilm, "minilm-onnx": _minilm_onnx,
                                              "minilm-onnx-int8": _minilm_onnx_int8, "hashing": HashingEncoder}


def render(encoder: Encoder) -> tuple[str, Callable[[str], str]]:
    """The shipped file's name, and its text given the commit its provenance names."""
    record = shipped_record(encoder, fit_space_centerer(encoder, encoder_dim(encoder)))

    def text(commit: str) -> str:
        return json.dumps({**record, "provenance": {"command": COMMAND, "commit": commit}}, indent=1,
                          sort_keys=True) + "\n"

    return f"{encoder.fingerprint}.json", text


#: The centerer's arrays, stored as base64 bytes of these dtypes.
_ARRAYS = {"mean_f32_b64": "<f4", "sum_f64_b64": "<f8"}


def decode(text: str) -> str:
    """A shipped file as ``--check`` compares it: the centerer's arrays as lists of numbers, and no
    fingerprint (it hashes the mean's bytes). Raises unless the file's fingerprint is its own mean's hash."""
    record = json.loads(text)
    centerer = record["centerer"]
    Centerer.from_dict(centerer)  # InvalidInput unless the fingerprint is the hash of this mean
    kept = {k: v for k, v in centerer.items() if k != "fingerprint" and k not in _ARRAYS}
    arrays = {k: np.frombuffer(base64.b64decode(centerer[k]), dtype).tolist() if centerer.get(k) else None
              for k, dtype in _ARRAYS.items()}
    return json.dumps({**record, "centerer": {**kept, **arrays}}, sort_keys=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="verify the shipped files instead of writing them")
    parser.add_argument("encoders", nargs="*", metavar="ENCODER",
                        help=f"which encoders, of {', '.join(ENCODERS)} (default: all)")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.encoders) - set(ENCODERS))
    if unknown:
        parser.error(f"encoders: expected some of {', '.join(ENCODERS)}, got {', '.join(unknown)}")
    failed = False
    CENTERING_DIR.mkdir(parents=True, exist_ok=True)
    for label in args.encoders or list(ENCODERS):
        name, text = render(ENCODERS[label]())
        path = CENTERING_DIR / name
        shipped = path.read_text(encoding="utf-8") if path.is_file() else None
        commit = json.loads(shipped).get("provenance", {}).get("commit") if shipped else None
        if args.check:
            same, how = compare(shipped, check_text(text, commit), decode=decode) if shipped else (False, "missing")
            print(f"{label}: {path} {'equals the refit, ' if same else 'DIFFERS from the refit: '}{how}")
            failed |= not same
        else:
            path.write_text(refit_text(text, shipped, commit, decode=decode), encoding="utf-8")
            print(f"{label}: wrote {path}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
