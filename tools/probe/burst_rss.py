#!/usr/bin/env python3
"""Hardening probe: memory of `moe serve` under a burst of large prompts.

Starts `BINARY serve` on MODEL, sends BURST concurrent completions whose prompt is
PROMPT_MB megabytes, and reports the server's RSS before, its peak (VmHWM) and its RSS
AFTER seconds after the burst, plus the answers' status codes and the burst's duration.
Run it against two builds (before/after a change) on the same machine:

  /usr/bin/python3 tools/probe/burst_rss.py --binary build/moe --model models/tiny-mixtral-shakespeare
"""
import argparse
import concurrent.futures
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serve_probe_util as u  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--burst", type=int, default=64)
    ap.add_argument("--prompt-mb", type=float, default=1.0)
    ap.add_argument("--after", type=float, default=3.0, help="seconds after the burst to read RSS")
    ap.add_argument("--log", default="/tmp/burst_rss_serve.log")
    ap.add_argument("--timeout", type=float, default=120, help="seconds a request may take")
    a = ap.parse_args()
    proc, port = u.start_server(a.binary, a.model, ["--max-body-bytes", str(int(a.prompt_mb * 2 * 2**20))], a.log)
    try:
        before, _ = u.rss_kb(proc.pid)
        prompt = "ROMEO: " * int(a.prompt_mb * 2**20 / 7)
        body = {"model": os.path.basename(a.model.rstrip("/")), "prompt": prompt, "max_tokens": 1}
        t0 = time.time()
        def one(_):
            try:
                return u.post_json(port, "/v1/completions", body, timeout=a.timeout)[0]
            except OSError:
                return "timeout"  # no answer within --timeout (the server is still working on it)
        with concurrent.futures.ThreadPoolExecutor(a.burst) as ex:
            codes = list(ex.map(one, range(a.burst)))
        seconds = time.time() - t0
        time.sleep(a.after)
        after, peak = u.rss_kb(proc.pid)
        try:
            health = u.get(port, "/health", timeout=10)[0]
        except OSError:
            health = "timeout"
    finally:
        u.stop_server(proc)
    print(json.dumps({"burst": a.burst, "prompt_mb": a.prompt_mb, "rss_before_mb": round(before / 1024, 1),
                      "peak_mb": round(peak / 1024, 1), "rss_after_mb": round(after / 1024, 1),
                      "burst_seconds": round(seconds, 2), "codes": {str(c): codes.count(c) for c in set(codes)},
                      "health_after": health}))


if __name__ == "__main__":
    main()
