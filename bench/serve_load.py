#!/usr/bin/env python3
"""Load on `dptrain serve`: throughput and latency at 1, 8 and 32 concurrent clients with batching
on (--max-batch 32) and off (--max-batch 1), then a rollout under load. Trains its own model (the
Shakespeare GPT's shape: 4 layers, 4 heads, 128 wide, block size 256; 2 steps, since speed does not
depend on the weights) on the README as text, starts each server on 127.0.0.1 with a free port,
sends a bounded number of requests, and stops the server with SIGTERM.

  bench/serve_load.py [--requests N] [--tokens N] [--threads N] [--build DIR] [--device cpu|cuda]
  bench/serve_load.py --url http://HOST:PORT [--api-key KEY] [--clients 1,8,32] [--requests N] [--tokens N]

--url: measure a server that is already running (dptrain's, or any with OpenAI's completions API,
behind a load balancer too) at each --clients count, and nothing else: no training, no server
started or stopped, no rollout. --api-key (or $OPENAI_API_KEY) is sent as a bearer token.

--build: the folder of the `dptrain` and `dptrain-data` measured (default: this checkout's build/;
another build, before or after a change, beside it on the same machine).
--device: where the server computes (`dptrain serve --device`); the training runs stay on the CPU.

Each request: a 4-character prompt, max_tokens (default 64), temperature 0.8, its own seed.
Reported per row: completed requests, failures, generated tokens per second over the row's wall
time, and the p50 and p99 of request latency (arrival to last byte, measured by the client).
"""
import argparse
import http.client
import urllib.parse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.join(ROOT, "build")
# Debian's Open MPI unpacked without its alternatives links has orterun alone.
MPIRUN = [shutil.which("mpirun") or shutil.which("orterun") or "mpirun", "--oversubscribe"] + \
    (["--allow-run-as-root"] if os.getuid() == 0 else [])
DEVICE = "cpu"
# Where requests go: a (scheme, host, port) and the headers every request carries.
TARGET = {"scheme": "http", "host": "127.0.0.1", "headers": {"Content-Type": "application/json"}}


def train(work, steps, resume=False):
    cmd = MPIRUN + ["-np", "1", f"{BUILD}/dptrain", "--config", f"{ROOT}/configs/gpt-shakespeare.ini",
                    "--data", f"{work}/tok", "--block-size", "256", "--batch-size", "2", "--steps", str(steps),
                    "--eval-every", "0", "--checkpoint-every", "2", "--run-dir", f"{work}/run"]
    if resume:
        cmd += ["--resume", "auto"]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)


def start(work, batch, threads, poll=0.0):
    p = subprocess.Popen([f"{BUILD}/dptrain", "serve", "--checkpoint", f"{work}/run", "--port", "0",
                          "--max-batch", str(batch), "--max-queue", "256", "--threads", str(threads),
                          "--poll-seconds", str(poll), "--device", DEVICE],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = p.stdout.readline()
    port = int(line.split("http://127.0.0.1:")[1].split()[0])
    return p, port


def stop(p):
    p.send_signal(signal.SIGTERM)
    if p.wait(timeout=120) != 0:
        sys.exit(f"serve exited {p.returncode} after SIGTERM")


def one(port, seed, tokens):
    kind = http.client.HTTPSConnection if TARGET["scheme"] == "https" else http.client.HTTPConnection
    c = kind(TARGET["host"], port, timeout=300)
    body = json.dumps({"prompt": "The ", "max_tokens": tokens, "temperature": 0.8, "seed": seed})
    t0 = time.perf_counter()
    c.request("POST", TARGET.get("path", "") + "/v1/completions", body=body, headers=TARGET["headers"])
    r = c.getresponse()
    data = r.read()
    dt = time.perf_counter() - t0
    c.close()
    if r.status != 200:
        return r.status, dt, 0, None
    j = json.loads(data)
    return 200, dt, j["usage"]["completion_tokens"], j.get("model_step")


def load(port, clients, requests, tokens):
    """requests in all, spread over `clients` threads; returns the row's numbers."""
    lat, toks, fails, lock = [], [0], [0], threading.Lock()
    counter = iter(range(requests))

    def worker():
        while True:
            with lock:
                i = next(counter, None)
            if i is None:
                return
            status, dt, n, _ = one(port, 1000 + i, tokens)
            with lock:
                if status == 200:
                    lat.append(dt)
                    toks[0] += n
                else:
                    fails[0] += 1

    t0 = time.perf_counter()
    ts = [threading.Thread(target=worker) for _ in range(clients)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    wall = time.perf_counter() - t0
    lat.sort()
    p99 = lat[min(len(lat) - 1, int(0.99 * len(lat)))] if lat else float("nan")
    return len(lat), fails[0], toks[0] / wall, statistics.median(lat) if lat else float("nan"), p99


def rollout(work, threads, tokens):
    """8 clients for the whole of a training run that writes newer checkpoints."""
    p, port = start(work, 32, threads, poll=0.2)
    stop_at, counts, steps, lock = [None], {}, {}, threading.Lock()

    def worker(k):
        i = 0
        while stop_at[0] is None or time.time() < stop_at[0]:
            status, _, _, step = one(port, 50000 + 1000 * k + i, tokens)
            i += 1
            with lock:
                counts[status] = counts.get(status, 0) + 1
                if step is not None:
                    steps[step] = steps.get(step, 0) + 1

    ts = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    [t.start() for t in ts]
    time.sleep(2)
    train(work, 6, resume=True)  # steps 4 and 6 appear as newer checkpoints
    stop_at[0] = time.time() + 3
    [t.join() for t in ts]
    stop(p)
    return counts, steps


def measure_running(a):
    u = urllib.parse.urlparse(a.url)
    if u.scheme not in ("http", "https") or not u.hostname:
        sys.exit(f"--url {a.url}: give http://HOST:PORT or https://HOST:PORT")
    TARGET.update(scheme=u.scheme, host=u.hostname, path=u.path.rstrip("/"))
    if a.api_key:
        TARGET["headers"]["Authorization"] = "Bearer " + a.api_key
    port = u.port or (443 if u.scheme == "https" else 80)
    try:
        clients = [int(c) for c in a.clients.split(",")]
    except ValueError:
        sys.exit(f"--clients {a.clients}: give counts like 1,8,32")
    print(f"{a.url}: {a.requests} requests a row, max_tokens {a.tokens}")
    print(f"{'clients':>7} {'requests':>8} {'failed':>6} {'tok/s':>9} {'p50 s':>8} {'p99 s':>8}")
    for n_clients in clients:
        n, failed, rate, p50, p99 = load(port, n_clients, a.requests, a.tokens)
        print(f"{n_clients:>7} {n:>8} {failed:>6} {rate:>9.0f} {p50:>8.3f} {p99:>8.3f}", flush=True)


def main():
    global BUILD, DEVICE
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=64, help="requests per row")
    ap.add_argument("--tokens", type=int, default=64, help="max_tokens of each request")
    ap.add_argument("--threads", type=int, default=1, help="the server's compute threads")
    ap.add_argument("--build", default=BUILD, help="the folder of the dptrain and dptrain-data measured")
    ap.add_argument("--device", default=DEVICE, choices=("cpu", "cuda"), help="where the server computes")
    ap.add_argument("--url", help="measure this running server (http[s]://HOST:PORT[/PREFIX]) and nothing else")
    ap.add_argument("--api-key", default=os.environ.get("OPENAI_API_KEY", ""), help="bearer token for --url")
    ap.add_argument("--clients", default="1,8,32", help="concurrent clients of each row, with --url")
    a = ap.parse_args()
    BUILD, DEVICE = os.path.abspath(a.build), a.device
    if a.url:
        return measure_running(a)
    work = tempfile.mkdtemp(prefix="dptrain-bench-")
    try:
        subprocess.run([f"{BUILD}/dptrain-data", "text", "--input", f"{ROOT}/README.md", "--out", f"{work}/tok"],
                       check=True, stdout=subprocess.DEVNULL)
        train(work, 2)
        print(f"{'batching':<10} {'clients':>7} {'requests':>8} {'failed':>6} {'tok/s':>9} {'p50 s':>8} {'p99 s':>8}")
        for batch, label in ((32, "on (32)"), (1, "off (1)")):
            p, port = start(work, batch, a.threads)
            for clients in (1, 8, 32):
                n, failed, rate, p50, p99 = load(port, clients, a.requests, a.tokens)
                print(f"{label:<10} {clients:>7} {n:>8} {failed:>6} {rate:>9.0f} {p50:>8.3f} {p99:>8.3f}", flush=True)
            stop(p)
        counts, steps = rollout(work, a.threads, a.tokens)
        print(f"rollout under load (8 clients): requests by status {dict(sorted(counts.items()))}, "
              f"answers by model step {dict(sorted(steps.items()))}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
