"""Export and import of collections, DataDir, and the CLI over them."""

from __future__ import annotations

import json
import os
import zipfile

import numpy as np
import pytest

import hopmem
from hopmem import AlreadyExists, CorruptStore, IncompatibleStore, InvalidInput, NotFound
from hopmem.cli import main as cli


def fill(coll, n_batches=8, d=8, seed=0):
    rng = np.random.default_rng(seed)
    C = rng.standard_normal((5, d)).astype(np.float32)
    for b in range(n_batches):
        X = (C[rng.integers(0, 5, 10)] + 0.2 * rng.standard_normal((10, d))).astype(np.float32)
        coll.write(X, metadata=[{"b": b, "j": j} for j in range(10)] if b % 2 == 0 else None)
        if b == 4:
            coll.compress(6)


def test_export_import_round_trip(tmp_path):
    src, dst, out = (str(tmp_path / n) for n in ("src.hopmem", "dst.hopmem", "c.zip"))
    with hopmem.open(src, dim=8, max_locations=12) as db:
        coll = db.collection("notes", seed=4)
        fill(coll)
        coll.documents.delete(3)
        coll.centering = {"mean": [0.5] * 8}
        coll.gate = {"tau": 0.25}
        state = coll.snapshot()
        docs = [(d.id, d.metadata) for d in coll.documents]
        manifest = coll.export(out)
    assert manifest["vectors"] == 80 and manifest["documents"] == 39 and manifest["entries"] == 9
    with zipfile.ZipFile(out) as zf:  # portable: plain zip, json and npy
        assert sorted(zf.namelist()) == ["documents.jsonl", "journal.jsonl", "manifest.json",
                                         "vectors.npy"]
        with zf.open("vectors.npy") as f:
            assert np.load(f).shape == (80, 8)
    with hopmem.open(dst, dim=8) as db:
        coll = db.import_collection(out)
        assert coll.name == "notes" and coll.config.seed == 4 and coll.config.max_locations == 12
        assert coll.snapshot() == state
        assert [(d.id, d.metadata) for d in coll.documents] == docs
        assert coll.centering == {"mean": [0.5] * 8} and coll.gate == {"tau": 0.25}
        assert coll.write(np.ones(8), metadata="next").ids == [41]  # ids continue, never reused
        renamed = db.import_collection(out, "copy")
        assert renamed.snapshot() == state
        with pytest.raises(AlreadyExists):
            db.import_collection(out, "copy")
        for d in docs[:5]:
            vec = renamed.documents.get(d[0]).vector
            assert renamed.resolve(vec, limit=1, mode="indexed")[0].id == d[0]
    with hopmem.open(dst) as db:
        assert db.get_collection("copy").snapshot() == state


def test_import_checks_dimension_and_encoder(tmp_path):
    out = str(tmp_path / "c.zip")

    class Enc:
        name, dim, fingerprint = "e", 8, "fp1"

    with hopmem.open(str(tmp_path / "a.hopmem"), encoder=Enc()) as db:
        fill(db.collection("c"), 2)
        db.export_collection("c", out)
        with pytest.raises(NotFound):
            db.export_collection("missing", out)
    with hopmem.open(str(tmp_path / "b.hopmem"), dim=4) as db:
        with pytest.raises(IncompatibleStore, match="dim=8, the database dim=4"):
            db.import_collection(out)
        assert db.collections() == []

    class Other:
        name, dim, fingerprint = "other", 8, "fp2"

    with hopmem.open(str(tmp_path / "c.hopmem"), encoder=Other()) as db:
        with pytest.raises(IncompatibleStore, match="fingerprint fp1"):
            db.import_collection(out)


def test_damaged_exports_are_refused_atomically(tmp_path):
    out = str(tmp_path / "c.zip")
    with hopmem.open(str(tmp_path / "a.hopmem"), dim=8) as db:
        fill(db.collection("c"), 3)
        db.export_collection("c", out)
    bad = str(tmp_path / "bad.zip")
    with zipfile.ZipFile(out) as zin, zipfile.ZipFile(bad, "w") as zout:
        for item in zin.namelist():
            data = zin.read(item)
            if item == "vectors.npy":
                data = data[: len(data) - 40]  # lose the end of the vectors
            zout.writestr(item, data)
    (tmp_path / "junk.zip").write_bytes(b"not a zip at all")
    with hopmem.open(str(tmp_path / "b.hopmem"), dim=8) as db:
        with pytest.raises(CorruptStore):
            db.import_collection(bad)
        with pytest.raises(CorruptStore, match="not a hopmem collection export"):
            db.import_collection(str(tmp_path / "junk.zip"))
        with pytest.raises(NotFound):
            db.import_collection(str(tmp_path / "missing.zip"))
        assert db.collections() == []  # nothing half-imported


def test_datadir_create_get_list_drop(tmp_path):
    root = tmp_path / "data"
    with hopmem.DataDir(root) as dd:
        assert dd.list() == []
        db = dd.create("alpha", 8, k=5)
        db.collection("c").write(np.ones(8))
        assert dd.get("alpha") is db
        with pytest.raises(AlreadyExists):
            dd.create("alpha", 8)
        with pytest.raises(NotFound, match="'beta' not found"):
            dd.get("beta")
        beta = dd.open("beta", 4)
        assert dd.open("beta") is beta
        with pytest.raises(IncompatibleStore):
            dd.open("beta", 8)
        assert dd.list() == ["alpha", "beta"] and "alpha" in dd
        for bad in ("Alpha", "1db", "a" * 64, "a.b", "", "a/b"):
            with pytest.raises(InvalidInput, match="database name"):
                dd.create(bad, 4)
        assert dd.drop("alpha") is True
        assert db.closed
        assert dd.drop("alpha") is False
        assert dd.list() == ["beta"]
        trash = os.listdir(root / ".trash")
        assert len(trash) == 1 and trash[0].startswith("alpha-")
        assert os.path.exists(root / ".trash" / trash[0] / "alpha.hopmem")
        assert dd.purge_trash(older_than=3600) == 0
        assert dd.purge_trash(older_than=-1) == 1
    with hopmem.DataDir(root) as dd:
        assert dd.get("beta").info()["dimension"] == 4


def test_datadir_drop_refuses_a_database_open_elsewhere(tmp_path):
    root = tmp_path / "data"
    with hopmem.DataDir(root) as dd:
        dd.create("x", 4).close()
        holder = hopmem.open(dd.path("x"))
        try:
            with pytest.raises(hopmem.StoreLocked):
                dd.drop("x")
            assert dd.list() == ["x"]
        finally:
            holder.close()


def test_cli_stats_export_import(tmp_path, capsys):
    src, dst, out = (str(tmp_path / n) for n in ("src.hopmem", "dst.hopmem", "c.zip"))
    with hopmem.open(src, dim=8) as db:
        fill(db.collection("notes"))
        state = db.collection("notes").snapshot()
    assert cli(["stats", src]) == 0
    text = capsys.readouterr().out
    assert "dimension  8" in text and "notes:" in text and "80 writes" in text
    assert cli(["stats", src, "--json", "--collection", "notes"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["stats"]["notes"]["writes"] == 80 and data["stats"]["notes"]["documents"] == 40
    assert cli(["export", src, "notes", out, "-q"]) == 0
    assert "80 vectors, 40 documents" in capsys.readouterr().out
    assert cli(["import", dst, out, "--name", "copy"]) == 0
    assert "imported 'copy'" in capsys.readouterr().out
    with hopmem.open(dst) as db:
        assert db.get_collection("copy").snapshot() == state
    assert cli(["stats", str(tmp_path / "missing.hopmem")]) == 1
    assert "no such database" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli(["nonsense"])
