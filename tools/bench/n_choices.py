#!/usr/bin/env python3
"""The cost of `n` choices in one request against n separate requests.

Against a running `moe serve`: for each round, in alternating order (A B, then B A, ...),
  A: one completions request with n choices (seed S, ignore_eos, max_tokens T);
  B: n separate requests with seeds S .. S + n - 1, sent at once (concurrent).
Prints per-round wall times, the median of the per-round ratios B/A, and checks that
choice j of A has exactly the text of B's request j (the seeds line up).

Usage: tools/bench/n_choices.py --url http://127.0.0.1:8000 [--n 4] [--rounds 10]
       [--max-tokens 64] [--prompt TEXT]
"""
import argparse
import concurrent.futures
import json
import statistics
import sys
import time
import urllib.request


def post(url, body):
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        return json.loads(r.read())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--n", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--prompt", default="First Citizen:\nBefore we proceed any further, hear me speak.")
    a = ap.parse_args()
    base = {"prompt": a.prompt, "max_tokens": a.max_tokens, "temperature": 1.0, "ignore_eos": True}
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=a.n)

    def run_a(seed):
        t = time.perf_counter()
        r = post(a.url, dict(base, n=a.n, seed=seed))
        return time.perf_counter() - t, [c["text"] for c in r["choices"]]

    def run_b(seed):
        t = time.perf_counter()
        futs = [pool.submit(post, a.url, dict(base, seed=seed + j)) for j in range(a.n)]
        texts = [f.result()["choices"][0]["text"] for f in futs]
        return time.perf_counter() - t, texts

    run_a(1), run_b(1)  # warm-up
    ratios, ta, tb, mismatches = [], [], [], 0
    for i in range(a.rounds):
        seed = 1000 + 10 * i
        if i % 2 == 0:
            (x, xt), (y, yt) = run_a(seed), run_b(seed)
        else:
            (y, yt), (x, xt) = run_b(seed), run_a(seed)
        mismatches += sum(1 for p, q in zip(xt, yt) if p != q)
        ta.append(x)
        tb.append(y)
        ratios.append(y / x)
        print(f"round {i}: n={a.n} in one request {x * 1000:.1f} ms, {a.n} requests {y * 1000:.1f} ms, "
              f"ratio {y / x:.3f}")
    print(json.dumps({"n": a.n, "rounds": a.rounds, "max_tokens": a.max_tokens,
                      "one_request_ms_median": round(statistics.median(ta) * 1000, 1),
                      "separate_requests_ms_median": round(statistics.median(tb) * 1000, 1),
                      "ratio_separate_over_one_median": round(statistics.median(ratios), 3),
                      "ratio_min": round(min(ratios), 3), "ratio_max": round(max(ratios), 3),
                      "text_mismatches": mismatches}))
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
