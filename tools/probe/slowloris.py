#!/usr/bin/env python3
"""Hardening probe: slowloris against `moe serve`.

Opens SOCKETS connections that trickle a request head (a header line every TRICKLE
seconds, never the blank line that ends it) for DURATION seconds, and meanwhile times
GET /health and a short completion every second on fresh connections. Prints one JSON
line: how many slow sockets were open, the worst /health and completion latency, the
failures (no answer within 5 s), and how many slow sockets the server closed (its head
deadline, --header-timeout). Start the server itself with --binary/--model, or give --port.

  /usr/bin/python3 tools/probe/slowloris.py --binary build/moe --model models/tiny-mixtral-shakespeare \
      --sockets 3000 --duration 20 --server-args="--max-connections-per-client 0"
"""
import argparse
import json
import os
import resource
import shlex
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serve_probe_util as u  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary")
    ap.add_argument("--model")
    ap.add_argument("--port", type=int)
    ap.add_argument("--server-args", default="")
    ap.add_argument("--sockets", type=int, default=3000)
    ap.add_argument("--duration", type=float, default=20)
    ap.add_argument("--trickle", type=float, default=2.0)
    a = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    proc = None
    port = a.port
    model_name = "model"
    if port is None:
        proc, port = u.start_server(a.binary, a.model, shlex.split(a.server_args), "/tmp/slowloris_serve.log")
        model_name = os.path.basename(a.model.rstrip("/"))
    slow = []
    try:
        for _ in range(a.sockets):
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
            s.setblocking(False)
            slow.append(s)
        health, completion, failures = [], [], 0
        t_end = time.time() + a.duration
        next_trickle = time.time() + a.trickle
        closed = 0
        while time.time() < t_end:
            for what, fn in (("health", lambda: u.get(port, "/health", timeout=5)),
                             ("completion", lambda: u.post_json(port, "/v1/completions",
                                                                {"model": model_name, "prompt": "ROMEO:",
                                                                 "max_tokens": 2}, timeout=5))):
                t0 = time.time()
                try:
                    code, _ = fn()
                    ok = code == 200
                except OSError:
                    ok = False
                (health if what == "health" else completion).append(time.time() - t0)
                failures += 0 if ok else 1
            if time.time() >= next_trickle:
                next_trickle += a.trickle
                alive = []
                for s in slow:
                    try:
                        s.send(b"X-Slow: 1\r\n")
                        alive.append(s)
                    except OSError:
                        closed += 1
                        s.close()
                slow = alive
            time.sleep(1)
        print(json.dumps({"slow_sockets": a.sockets, "closed_by_server": closed,
                          "health_max_s": round(max(health), 3), "completion_max_s": round(max(completion), 3),
                          "probes": len(health) + len(completion), "failures": failures}))
    finally:
        for s in slow:
            s.close()
        if proc is not None:
            u.stop_server(proc)


if __name__ == "__main__":
    main()
