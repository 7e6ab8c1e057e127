#!/usr/bin/env python3
"""The front door under attack and under load, for the figures docs/server.md reports.

Starts `pagoda serve --model demo` (or the model given) from each binary named, one after the
other, and measures on each:
  - /health latency (p50, p99, max, failures) on fresh connections, probed every 50 ms while N
    connections trickle their headers a byte a second (a slowloris);
  - resident memory per idle connection (the slowloris connections) and per streaming
    connection (streams whose client reads slowly);
  - wrk requests/s on GET /health and POST /tokenize (when wrk is installed).
Run it alone on the machine: everything shares the cores with the server.

  bench/front_door.py ./build/pagoda [/path/to/old/pagoda] [--connections 1000]
"""
import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def health(port, timeout=10.0):
    t0 = time.perf_counter()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = s.recv(4096)
                if not chunk:
                    break
                data += chunk
        ok = data.startswith(b"HTTP/1.1 200")
    except OSError:
        ok = False
    return ok, time.perf_counter() - t0


def start_server(binary, model, port, extra):
    cmd = [binary, "serve", "--model", model, "--port", str(port), "--log-level", "warning"] + extra
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while time.time() < deadline:
        if proc.poll() is not None:
            sys.exit(f"{binary} exited with {proc.returncode}")
        ok, _ = health(port, 1.0)
        if ok:
            return proc
        time.sleep(0.2)
    proc.kill()
    sys.exit(f"{binary} did not become healthy")


def slowloris(port, pid, connections, seconds):
    base = rss_kib(pid)
    socks = []
    for _ in range(connections):
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
            s.setblocking(False)
            socks.append(s)
        except OSError:
            break
    time.sleep(0.5)
    held = rss_kib(pid)
    latencies, failures = [], 0
    end = time.time() + seconds
    next_trickle = time.time()
    while time.time() < end:
        if time.time() >= next_trickle:
            for s in socks:
                try:
                    s.send(b"X")
                except OSError:
                    pass
            next_trickle = time.time() + 1.0
        ok, dt = health(port, 10.0)
        if ok:
            latencies.append(dt)
        else:
            failures += 1
        time.sleep(0.05)
    for s in socks:
        s.close()
    latencies.sort()
    pick = lambda q: latencies[min(len(latencies) - 1, int(q * len(latencies)))] if latencies else float("nan")
    return {
        "connections_opened": len(socks),
        "health_probes": len(latencies) + failures,
        "health_failures": failures,
        "health_p50_ms": round(pick(0.50) * 1000, 2),
        "health_p99_ms": round(pick(0.99) * 1000, 2),
        "health_max_ms": round((latencies[-1] if latencies else float("nan")) * 1000, 2),
        "rss_per_idle_connection_kib": round((held - base) / max(len(socks), 1), 2),
    }


def streaming_memory(port, pid, streams):
    base = rss_kib(pid)
    body = json.dumps({"prompt": "once upon a time", "max_tokens": 400, "stream": True,
                       "ignore_eos": True}).encode()
    socks = []
    for _ in range(streams):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        socks.append(s)
    time.sleep(3)
    held = rss_kib(pid)
    for s in socks:
        s.close()
    return {"streams": streams, "rss_per_stream_kib": round((held - base) / streams, 2)}


def wrk(port, path, seconds, connections):
    if not shutil.which("wrk"):
        return None
    script = None
    cmd = ["wrk", "-t2", f"-c{connections}", f"-d{seconds}s", "--latency"]
    if path == "/tokenize":
        script = tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False)
        script.write('wrk.method = "POST"\nwrk.body = \'{"prompt": "The quick brown fox jumps over '
                     'the lazy dog"}\'\nwrk.headers["Content-Type"] = "application/json"\n')
        script.close()
        cmd += ["-s", script.name]
    out = subprocess.run(cmd + [f"http://127.0.0.1:{port}{path}"], capture_output=True,
                         text=True).stdout
    if script:
        os.unlink(script.name)
    for line in out.splitlines():
        if line.startswith("Requests/sec:"):
            return float(line.split()[1])
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binaries", nargs="+")
    ap.add_argument("--model", default="demo")
    ap.add_argument("--connections", type=int, default=1000)
    ap.add_argument("--seconds", type=int, default=20)
    ap.add_argument("--streams", type=int, default=100)
    ap.add_argument("--extra", default="", help="more serve flags, one string")
    args = ap.parse_args()
    results = {}
    for binary in args.binaries:
        port = free_port()
        proc = start_server(binary, args.model, port, args.extra.split())
        try:
            r = {"idle_rss_kib": rss_kib(proc.pid)}
            r["slowloris"] = slowloris(port, proc.pid, args.connections, args.seconds)
            time.sleep(1)
            r["streaming"] = streaming_memory(port, proc.pid, args.streams)
            time.sleep(2)
            r["wrk_health_rps"] = wrk(port, "/health", 10, 32)
            r["wrk_tokenize_rps"] = wrk(port, "/tokenize", 10, 32)
        finally:
            proc.terminate()
            proc.wait(timeout=60)
        results[binary] = r
        print(json.dumps({binary: r}, indent=2), flush=True)


if __name__ == "__main__":
    main()
