#!/usr/bin/env python3
"""The quality cost of a 16-bit KV cache (--kv-dtype): mean NLL (and perplexity) on held-out
Tiny Shakespeare, through `moe serve`'s completions with echo + logprobs (every prompt
token scored by the engine itself, the paged cache and its attention), one server per
dtype, the same windows for all; plus the largest change of a scored token's logprob
against f32.

Windows: the held-out text from character 1059636 (tools/reference/make_golden.py's
HELDOUT_OFFSET), tokenized by the server (/tokenize), cut into consecutive windows of
BOS + 255 tokens (the model card's protocol: 255 scored tokens per window).

Usage: tools/bench/kv_dtype_quality.py MOE_BINARY MODEL_DIR [--windows N] [--dtypes f32,bf16,f16]
"""
import argparse
import json
import math
import os
import socket
import subprocess
import sys
import time
import urllib.request

TEXT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "shared", "data", "tinyshakespeare.txt")
HELDOUT_OFFSET = 1059636
WINDOW = 256


def post(port, path, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(moe, model, dtype):
    port = free_port()
    p = subprocess.Popen([moe, "serve", "--model", model, "--port", str(port), "--threads", "2", "--kv-dtype", dtype],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(600):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
            return p, port
        except Exception:
            if p.poll() is not None:
                sys.exit(f"moe serve --kv-dtype {dtype} exited with {p.returncode}")
            time.sleep(0.2)
    p.kill()
    sys.exit("moe serve did not start")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("moe")
    ap.add_argument("model")
    ap.add_argument("--windows", type=int, default=16)
    ap.add_argument("--dtypes", default="f32,bf16,f16")
    ap.add_argument("--text", default=TEXT)
    a = ap.parse_args()
    text = open(a.text, encoding="utf-8").read()[HELDOUT_OFFSET:]
    dtypes = a.dtypes.split(",")
    scored = {}
    for dt in dtypes:
        p, port = start(a.moe, a.model, dt)
        try:
            ids = post(port, "/tokenize", {"prompt": text, "add_special_tokens": False})["tokens"]
            bos = post(port, "/tokenize", {"prompt": "", "add_special_tokens": True})["tokens"]
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=60) as r:
                model_id = json.loads(r.read())["data"][0]["id"]
            n = min(a.windows, len(ids) // (WINDOW - 1))
            lps = []
            for w in range(n):
                prompt = bos + ids[w * (WINDOW - 1):(w + 1) * (WINDOW - 1)]
                r = post(port, "/v1/completions", {"model": model_id, "prompt": prompt, "max_tokens": 1, "echo": True,
                                                   "logprobs": 0, "temperature": 0})
                lps += [x for x in r["choices"][0]["logprobs"]["token_logprobs"][1:len(prompt)]]
            scored[dt] = lps
        finally:
            p.terminate()
            p.wait()
    ref = scored[dtypes[0]]
    print(f"model {a.model}: {len(ref)} scored tokens in {len(ref) // (WINDOW - 1)} windows of BOS + {WINDOW - 1}")
    print(f"{'kv dtype':>8} {'mean NLL':>10} {'perplexity':>11} {'max |dlogprob|':>15} {'mean |dlogprob|':>16}")
    for dt in dtypes:
        lps = scored[dt]
        nll = -sum(lps) / len(lps)
        diffs = [abs(x - y) for x, y in zip(lps, ref)]
        print(f"{dt:>8} {nll:10.4f} {math.exp(nll):11.3f} {max(diffs):15.5f} {sum(diffs) / len(diffs):16.6f}")


if __name__ == "__main__":
    main()
