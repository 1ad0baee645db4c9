#!/usr/bin/env python3
"""/healthz's latency while many clients hold connections without finishing a request.

Starts `BUILD/dptrain serve --checkpoint RUN --port 0` on 127.0.0.1, keeps CLIENTS connections
open that send nothing (idle) or their headers a byte every 50 ms (trickle), reopening each the
server closes, and meanwhile asks GET /healthz every 0.5 s for SECONDS; prints the probes' median
and largest latency, then stops the server.

    bench/serve_slow_clients.py BUILD RUN [--clients 85] [--seconds 8] [--mode idle|trickle]
"""
import argparse
import socket
import statistics
import subprocess
import sys
import threading
import time


def hold(port, n, mode, until):
    live = []
    while time.time() < until:
        while len(live) < n:
            try:
                s = socket.create_connection(("127.0.0.1", port))
            except OSError:
                break
            s.setblocking(False)
            live.append(s)
        kept = []
        for s in live:
            try:
                if s.recv(64) == b"":  # closed by the server: reopened next round
                    s.close()
                    continue
            except BlockingIOError:
                pass
            except OSError:
                s.close()
                continue
            if mode == "trickle":
                try:
                    s.send(b"G")
                except OSError:
                    s.close()
                    continue
            kept.append(s)
        live = kept
        time.sleep(0.05)
    for s in live:
        s.close()


def main():
    a = argparse.ArgumentParser()
    a.add_argument("build")
    a.add_argument("run")
    a.add_argument("--clients", type=int, default=85)
    a.add_argument("--seconds", type=float, default=8)
    a.add_argument("--mode", choices=["idle", "trickle"], default="idle")
    o = a.parse_args()
    server = subprocess.Popen([f"{o.build}/dptrain", "serve", "--checkpoint", o.run, "--port", "0"],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        line = server.stdout.readline()
        port = int(line.split("http://127.0.0.1:")[1].split()[0])
        until = time.time() + o.seconds
        threading.Thread(target=hold, args=(port, o.clients, o.mode, until), daemon=True).start()
        time.sleep(0.5)
        took = []
        while time.time() < until - 1:
            t0 = time.time()
            s = socket.create_connection(("127.0.0.1", port), timeout=30)
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            if not s.recv(100).startswith(b"HTTP/1.1 200"):
                sys.exit("healthz did not answer 200")
            s.close()
            took.append(time.time() - t0)
            time.sleep(0.5)
        print(f"{o.build}: {o.clients} {o.mode} clients, {len(took)} probes: /healthz median "
              f"{statistics.median(took):.2f} s, largest {max(took):.2f} s")
    finally:
        server.terminate()
        server.wait(timeout=30)


if __name__ == "__main__":
    main()
