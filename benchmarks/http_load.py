"""HTTP load test: latency (p50, p99) and throughput of reads and writes over loopback.

Starts its own server (``python -m hopmem.server serve``) on a free loopback
port with a temporary data directory, or targets a running one with ``--url``
(loopback addresses only). Each client holds one keep-alive connection and
sends pre-encoded requests: by default an asyncio protocol per connection with
pre-built request bytes, each response read whole and checked for status 200
(the cheapest client, since client and server share the machine's cores), or
with ``--client http.client`` one thread per client.

Every phase is bounded both in requests and in seconds.

    python benchmarks/http_load.py                       # d = 384, 1 and 16 clients
    python benchmarks/http_load.py --requests 5000 --duration 20 --json out.json
    python benchmarks/http_load.py --url http://127.0.0.1:6380 --collection bench

Targets (issue 5): one client reads p50 <= 1 ms; 16 clients >= 2,000 reads/s.
"""

from __future__ import annotations

import argparse
import http.client
import ipaddress
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent


def _summary(clients: int, latencies: list[float], elapsed: float) -> dict:
    """Requests, throughput and latency percentiles of one phase."""
    all_lat = sorted(latencies)
    n = len(all_lat)
    return {
        "clients": clients,
        "requests": n,
        "seconds": elapsed,
        "rps": n / elapsed if elapsed else 0.0,
        "p50_ms": 1e3 * all_lat[n // 2] if n else float("nan"),
        "p99_ms": 1e3 * all_lat[min(n - 1, int(n * 0.99))] if n else float("nan"),
        "mean_ms": 1e3 * statistics.fmean(all_lat) if n else float("nan"),
    }


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class Client:
    """One keep-alive connection; ``post``/``get`` return (status, body bytes)."""

    def __init__(self, host: str, port: int, token: str | None = None) -> None:
        self.conn = http.client.HTTPConnection(host, port, timeout=60)
        self.headers = {"Content-Type": "application/json"}
        if token:
            self.headers["Authorization"] = f"Bearer {token}"

    def call(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        try:
            self.conn.request(method, path, body=body, headers=self.headers)
            resp = self.conn.getresponse()
        except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
            # an idle keep-alive connection the server closed: reconnect once
            self.conn.close()
            self.conn.request(method, path, body=body, headers=self.headers)
            resp = self.conn.getresponse()
        return resp.status, resp.read()

    def close(self) -> None:
        self.conn.close()


def wait_healthy(host: str, port: int, timeout: float, proc: subprocess.Popen | None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise SystemExit(f"server exited with code {proc.returncode} before becoming healthy")
        try:
            c = Client(host, port)
            status, _ = c.call("GET", "/health")
            c.close()
            if status == 200:
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise SystemExit(f"server on {host}:{port} not healthy after {timeout:.0f} s")


def run_phase(host: str, port: int, token: str | None, method: str, path: str,
              bodies: list[bytes], clients: int, max_requests: int,
              max_seconds: float) -> dict[str, float]:
    """``clients`` threads share a budget of requests and a deadline."""
    lock = threading.Lock()
    issued = [0]
    latencies: list[list[float]] = [[] for _ in range(clients)]
    errors: list[str] = []
    start_barrier = threading.Barrier(clients + 1)
    deadline = [0.0]

    def worker(i: int) -> None:
        c = Client(host, port, token)
        c.call("GET", "/health")  # open the connection before timing
        lat = latencies[i]
        nb = len(bodies)
        j = i
        start_barrier.wait()
        try:
            while True:
                with lock:
                    if issued[0] >= max_requests:
                        break
                    issued[0] += 1
                if time.perf_counter() > deadline[0]:
                    break
                body = bodies[j % nb]
                j += clients
                t0 = time.perf_counter()
                status, data = c.call(method, path, body)
                lat.append(time.perf_counter() - t0)
                if status != 200:
                    errors.append(f"{status}: {data[:200]!r}")
                    break
        finally:
            c.close()

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(clients)]
    for t in threads:
        t.start()
    deadline[0] = time.perf_counter() + max_seconds
    t_start = time.perf_counter()
    start_barrier.wait()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t_start
    if errors:
        raise SystemExit(f"{method} {path}: {len(errors)} failed request(s), first: {errors[0]}")
    return _summary(clients, [x for lat in latencies for x in lat], elapsed)


def process_cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of a process (Linux /proc), or None elsewhere."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def engine_baseline(stored: np.ndarray, queries: np.ndarray, strategy: str,
                    seconds: float = 3.0) -> dict[str, float]:
    """The same reads in process, without HTTP: what the engine alone costs per read."""
    sys.path.insert(0, str(ROOT))
    import hopmem

    mem = hopmem.Memory(stored.shape[1])
    mem.write(stored)
    times = []
    deadline = time.perf_counter() + seconds
    i = 0
    while time.perf_counter() < deadline and i < 5000:
        q = queries[i % len(queries)]
        t0 = time.perf_counter()
        mem.analyze(q, strategy)
        times.append(time.perf_counter() - t0)
        i += 1
    times.sort()
    return {"reads": len(times), "p50_ms": 1e3 * times[len(times) // 2],
            "p99_ms": 1e3 * times[min(len(times) - 1, int(len(times) * 0.99))]}


def request_bytes(method: str, path: str, host: str, port: int, body: bytes,
                   token: str | None) -> bytes:
    head = (f"{method} {path} HTTP/1.1\r\nHost: {host}:{port}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n")
    if token:
        head += f"Authorization: Bearer {token}\r\n"
    return head.encode() + b"\r\n" + body


class _RawPhase:
    """What the connections of one raw phase share: requests, budget, deadline, results."""

    def __init__(self, requests: list[bytes], clients: int, max_requests: int) -> None:
        self.requests = requests
        self.clients = clients
        self.max_requests = max_requests
        self.deadline = float("inf")
        self.issued = 0
        self.latencies: list[float] = []
        self.errors: list[str] = []


class _RawConnection:
    """One keep-alive connection (an asyncio protocol) that sends its next request from
    the callback that completes a response: no task, future or stream buffer per request.

    Every response is read whole (status line, headers, ``Content-Length`` bytes of
    body) before the next request goes out; a status other than 200, stray bytes or a
    connection lost with a request in flight is an error, and stops the connection.
    """

    def __init__(self, phase: _RawPhase, first: int, done: Any) -> None:
        self.phase = phase
        self.next = first
        self.done = done
        self.transport: Any = None
        self.buf = b""
        self.expect = -1  # length of the response in flight (head and body), -1 until its head
        self.in_flight = False
        self.t0 = 0.0

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def send(self) -> None:
        phase = self.phase
        if phase.issued >= phase.max_requests or time.perf_counter() >= phase.deadline:
            self.transport.close()
            return
        phase.issued += 1
        self.in_flight = True
        self.t0 = time.perf_counter()
        self.transport.write(phase.requests[self.next % len(phase.requests)])
        self.next += phase.clients

    def data_received(self, data: bytes) -> None:
        self.buf = self.buf + data if self.buf else data
        if self.expect < 0:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            length = _content_length(self.buf[:end])
            if length is None:
                self.phase.errors.append(f"no Content-Length: {self.buf[:200]!r}")
                self.transport.close()
                return
            self.expect = end + 4 + length
        if len(self.buf) < self.expect:
            return
        phase = self.phase
        phase.latencies.append(time.perf_counter() - self.t0)
        response, self.buf, self.expect = self.buf[:self.expect], self.buf[self.expect:], -1
        self.in_flight = False
        if self.buf:
            phase.errors.append(f"bytes after a response: {self.buf[:200]!r}")
        elif response[9:12] != b"200":
            phase.errors.append(f"{response[9:12].decode()}: {response[-200:]!r}")
        if phase.errors:
            self.transport.close()
        else:
            self.send()

    def eof_received(self) -> None:
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        if self.in_flight:
            self.phase.errors.append(f"connection lost with a request in flight ({exc!r})")
        if not self.done.done():
            self.done.set_result(None)


def _content_length(head: bytes) -> int | None:
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    return None


def run_phase_raw(host: str, port: int, token: str | None, method: str, path: str,
                  bodies: list[bytes], clients: int, max_requests: int,
                  max_seconds: float) -> dict[str, float]:
    """Like :func:`run_phase`, with asyncio protocol connections and pre-built requests.

    The client spends tens of microseconds per request instead of a few hundred, so
    more of the machine's cores are left to the server (they share the machine).
    """
    requests = [request_bytes(method, path, host, port, b, token) for b in bodies]
    return run_requests_raw(host, port, requests, clients, max_requests, max_seconds, f"{method} {path}")


def run_requests_raw(host: str, port: int, requests: list[bytes], clients: int, max_requests: int,
                     max_seconds: float, what: str = "requests") -> dict[str, float]:
    """:func:`run_phase_raw`'s load on ready-made requests (:func:`request_bytes`), which may
    differ in method and path; client ``i`` starts at request ``i``."""
    import asyncio

    phase = _RawPhase(requests, clients, max_requests)

    async def run() -> float:
        loop = asyncio.get_running_loop()
        conns = []
        for i in range(clients):
            done = loop.create_future()
            _, conn = await loop.create_connection(
                lambda i=i, done=done: _RawConnection(phase, i, done), host, port)
            conns.append(conn)
        t_start = time.perf_counter()
        phase.deadline = t_start + max_seconds
        for conn in conns:
            conn.send()
        await asyncio.gather(*(conn.done for conn in conns))
        return time.perf_counter() - t_start

    try:
        import uvloop
        elapsed = uvloop.run(run())
    except ImportError:
        elapsed = asyncio.run(run())
    if phase.errors:
        raise SystemExit(f"{what}: {len(phase.errors)} failed request(s), first: "
                         f"{phase.errors[0]}")
    return _summary(clients, phase.latencies, elapsed)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", help="target a running server (loopback only) instead of starting one")
    p.add_argument("--token", default=os.environ.get("HOPMEM_API_KEY"),
                   help="API key for --url (env HOPMEM_API_KEY)")
    p.add_argument("--db", default="default", help="database (default: default)")
    p.add_argument("--collection", default="http_load", help="collection (default: http_load)")
    p.add_argument("--dimension", type=int, default=384)
    p.add_argument("--prefill", type=int, default=1000,
                   help="vectors written before the read phases (default 1000)")
    p.add_argument("--requests", type=int, default=3000,
                   help="most requests per phase (default 3000)")
    p.add_argument("--duration", type=float, default=10.0,
                   help="most seconds per phase (default 10)")
    p.add_argument("--clients", default="1,16", help="client counts (default 1,16)")
    p.add_argument("--strategy", default="iterative", choices=("iterative", "fast"))
    p.add_argument("--no-writes", action="store_true", help="skip the write phases")
    p.add_argument("--client", choices=("raw", "http.client"), default="raw",
                   help="raw: asyncio protocol connections with pre-built requests "
                        "(cheapest client); "
                        "http.client: one thread per client (default raw)")
    p.add_argument("--server-arg", action="append", default=[],
                   help="extra argument for the server this script starts (repeatable)")
    p.add_argument("--no-baseline", action="store_true",
                   help="skip timing the same reads in process without HTTP")
    p.add_argument("--json", help="also write the results to this file")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)

    clients = [int(c) for c in args.clients.split(",") if c.strip()]
    rng = np.random.default_rng(args.seed)
    d = args.dimension

    proc = None
    tmp = None
    if args.url:
        u = urllib.parse.urlsplit(args.url)
        host, port = u.hostname or "127.0.0.1", u.port or 80
        if not _loopback(host):
            raise SystemExit("--url must be a loopback address (this is a local benchmark)")
        if u.scheme != "http":
            raise SystemExit("--url: only http:// is supported")
    else:
        host, port = "127.0.0.1", free_port()
        tmp = tempfile.mkdtemp(prefix="hopmem-load-")
        cmd = [sys.executable, "-m", "hopmem.server", "serve", "--data-dir", tmp,
               "--dimension", str(d), "--host", host, "--port", str(port), "--auth", "off",
               "--log-level", "warning", *args.server_arg]
        env = dict(os.environ)
        env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        proc = subprocess.Popen(cmd, env=env)
    try:
        wait_healthy(host, port, 60.0, proc)
        prefix = "" if args.db == "default" else f"/db/{args.db}"
        base = f"{prefix}/collections/{urllib.parse.quote(args.collection, safe='')}"

        def unit(n: int) -> np.ndarray:
            x = rng.standard_normal((n, d)).astype(np.float32)
            return x / np.linalg.norm(x, axis=1, keepdims=True)

        setup = Client(host, port, args.token)
        stored = unit(args.prefill)
        for i in range(0, args.prefill, 200):
            body = json.dumps({"vectors": stored[i:i + 200].tolist()}).encode()
            status, data = setup.call("POST", f"{base}/write", body)
            if status != 200:
                raise SystemExit(f"prefill write failed: {status} {data[:200]!r}")
        status, data = setup.call("GET", f"{base}/stats")
        prefill_stats = json.loads(data)
        # Queries: noisy copies of stored vectors (what a recall looks like).
        idx = rng.integers(0, max(args.prefill, 1), 256)
        queries = stored[idx] + 0.3 * unit(256) if args.prefill else unit(256)
        read_bodies = [json.dumps({"query": q.tolist(), "strategy": args.strategy}).encode()
                       for q in queries]
        write_bodies = [json.dumps({"vectors": [v.tolist()]}).encode() for v in unit(256)]

        results = {"dimension": d, "prefill_stats": prefill_stats, "phases": []}
        print(f"server http://{host}:{port}, d={d}, collection {args.collection!r}: "
              f"{prefill_stats.get('num_locations')} locations after {args.prefill} writes")
        print(f"{'phase':<8}{'clients':>8}{'requests':>10}{'seconds':>9}{'req/s':>10}"
              f"{'p50 ms':>9}{'p99 ms':>9}{'srv us/req':>12}")
        phases = [("read", f"{base}/read", read_bodies)]
        if not args.no_writes:
            phases.append(("write", f"{base}/write", write_bodies))
        for kind, path, bodies in phases:
            for c in clients:
                runner = run_phase_raw if args.client == "raw" else run_phase
                cpu0 = process_cpu_seconds(proc.pid) if proc is not None else None
                r = runner(host, port, args.token, "POST", path, bodies, c, args.requests,
                           args.duration)
                cpu1 = process_cpu_seconds(proc.pid) if proc is not None else None
                if cpu0 is not None and cpu1 is not None and r["requests"]:
                    r["server_cpu_us_per_request"] = 1e6 * (cpu1 - cpu0) / r["requests"]
                r["phase"] = kind
                results["phases"].append(r)
                cpu = r.get("server_cpu_us_per_request")
                print(f"{kind:<8}{c:>8}{r['requests']:>10}{r['seconds']:>9.2f}{r['rps']:>10.0f}"
                      f"{r['p50_ms']:>9.3f}{r['p99_ms']:>9.3f}"
                      + (f"{cpu:>12.0f}" if cpu is not None else f"{'-':>12}"), flush=True)
        status, data = setup.call("GET", f"{base}/stats")
        final = json.loads(data)
        written = sum(r["requests"] for r in results["phases"] if r["phase"] == "write")
        results["final_stats"] = final
        expected = prefill_stats.get("writes", 0) + written
        results["writes_check"] = {"expected": expected, "stats_writes": final.get("writes")}
        if final.get("writes") != expected:
            print(f"WARNING: stats.writes={final.get('writes')} but {expected} were written",
                  file=sys.stderr)
        setup.close()

        if not args.url and not args.no_baseline:
            base_r = engine_baseline(stored, queries, args.strategy)
            results["engine_baseline"] = base_r
            print(f"engine alone (in process, no HTTP): analyze p50 {base_r['p50_ms']:.3f} ms, "
                  f"p99 {base_r['p99_ms']:.3f} ms over {base_r['reads']} reads")
        load = os.getloadavg() if hasattr(os, "getloadavg") else None
        if load is not None:
            results["loadavg"] = load
            print(f"machine load average {load[0]:.1f} on {os.cpu_count()} cores")
        reads = {r["clients"]: r for r in results["phases"] if r["phase"] == "read"}
        targets = {}
        if 1 in reads:
            targets["read_p50_1_client_le_1ms"] = reads[1]["p50_ms"] <= 1.0
        if 16 in reads:
            targets["read_rps_16_clients_ge_2000"] = reads[16]["rps"] >= 2000
        results["targets_met"] = targets
        for name, ok in targets.items():
            print(f"target {name}: {'met' if ok else 'NOT met'}")
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=2))
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
