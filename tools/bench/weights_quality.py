#!/usr/bin/env python3
"""The quality cost of an engine option such as --weights int8 or --kv-dtype bf16: against the
first variant (default: --weights native),
  1. mean NLL and perplexity on held-out Tiny Shakespeare, every prompt token scored by
     the engine itself through `moe serve`'s completions with echo + logprobs (windows
     of BOS + 255 tokens from character 1059636, the model card's protocol), and the
     largest change of a scored token's logprob;
  2. the logit error at the last prompt position (`moe generate --logits-out`, the full
     vocabulary) for --prompts prompts cut from the same text: max |dlogit| / logit range
     and the RMS of dlogit / RMS of the logits.

Usage: weights_quality.py MOE MODEL_DIR [--windows 16] [--prompts 8] [--threads 2]
         [--variants "--weights native;--weights int8"] [--skip-nll]
"""
import argparse
import json
import math
import os
import shlex
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request

TEXT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "shared", "data", "tinyshakespeare.txt")
HELDOUT_OFFSET = 1059636
WINDOW = 256


def post(port, path, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=900) as r:
        return json.loads(r.read())


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(moe, model, flags, threads):
    port = free_port()
    p = subprocess.Popen([moe, "serve", "--model", model, "--port", str(port), "--threads", str(threads)] + flags,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(3000):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
            return p, port
        except Exception:
            if p.poll() is not None:
                sys.exit(f"moe serve {' '.join(flags)} exited with {p.returncode}")
            time.sleep(0.2)
    p.kill()
    sys.exit("moe serve did not start")


def nll_scores(moe, model, flags, text, windows, threads):
    p, port = serve(moe, model, flags, threads)
    try:
        ids = post(port, "/tokenize", {"prompt": text, "add_special_tokens": False})["tokens"]
        bos = post(port, "/tokenize", {"prompt": "", "add_special_tokens": True})["tokens"]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=60) as r:
            model_id = json.loads(r.read())["data"][0]["id"]  # the server refuses another name (404)
        lps = []
        for w in range(min(windows, len(ids) // (WINDOW - 1))):
            prompt = bos + ids[w * (WINDOW - 1):(w + 1) * (WINDOW - 1)]
            r = post(port, "/v1/completions", {"model": model_id, "prompt": prompt, "max_tokens": 1, "echo": True,
                                               "logprobs": 0, "temperature": 0})
            lps += r["choices"][0]["logprobs"]["token_logprobs"][1:len(prompt)]
        return lps
    finally:
        p.terminate()
        p.wait()


def last_logits(moe, model, flags, prompt, threads):
    with tempfile.NamedTemporaryFile(suffix=".f32") as f:
        subprocess.run([moe, "generate", "--model", model, "--prompt", prompt, "--max-tokens", "1", "--threads",
                        str(threads), "--logits-out", f.name] + flags, check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        raw = open(f.name, "rb").read()
    return struct.unpack(f"<{len(raw) // 4}f", raw)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("moe")
    ap.add_argument("model")
    ap.add_argument("--windows", type=int, default=16)
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--variants", default="--weights native;--weights int8")
    ap.add_argument("--skip-nll", action="store_true")
    ap.add_argument("--text", default=TEXT)
    a = ap.parse_args()
    text = open(a.text, encoding="utf-8").read()[HELDOUT_OFFSET:]
    variants = [v.strip() for v in a.variants.split(";")]
    print(f"model {a.model}; variants compared with the first: {variants}")
    if not a.skip_nll:
        scored = {v: nll_scores(a.moe, a.model, shlex.split(v), text, a.windows, a.threads) for v in variants}
        ref = scored[variants[0]]
        print(f"\nheld-out Tiny Shakespeare: {len(ref)} scored tokens in {len(ref) // (WINDOW - 1)} windows of BOS + "
              f"{WINDOW - 1}")
        print(f"{'variant':>24} {'mean NLL':>10} {'perplexity':>11} {'max |dlogprob|':>15} {'mean |dlogprob|':>16}")
        for v in variants:
            lps = scored[v]
            nll = -sum(lps) / len(lps)
            d = [abs(x - y) for x, y in zip(lps, ref)]
            print(f"{v:>24} {nll:10.4f} {math.exp(nll):11.3f} {max(d):15.5f} {sum(d) / len(d):16.6f}")
    prompts = [text[i * 997:i * 997 + 600] for i in range(a.prompts)]
    print(f"\nlast-position logits, {len(prompts)} prompts of 600 characters of the held-out text")
    print(f"{'variant':>24} {'max |dlogit|/range':>19} {'rms dlogit/rms logit':>21} {'top-1 agree':>12}")
    ref = [last_logits(a.moe, a.model, shlex.split(variants[0]), p, a.threads) for p in prompts]
    for v in variants[1:]:
        worst, rel, agree = 0.0, [], 0
        for p, r in zip(prompts, ref):
            g = last_logits(a.moe, a.model, shlex.split(v), p, a.threads)
            rng = max(r) - min(r)
            worst = max(worst, max(abs(x - y) for x, y in zip(g, r)) / rng)
            rel.append(math.sqrt(sum((x - y) ** 2 for x, y in zip(g, r)) / sum(y * y for y in r)))
            agree += max(range(len(g)), key=g.__getitem__) == max(range(len(r)), key=r.__getitem__)
        print(f"{v:>24} {worst:19.2e} {max(rel):21.2e} {agree:>7}/{len(prompts)}")


if __name__ == "__main__":
    main()
