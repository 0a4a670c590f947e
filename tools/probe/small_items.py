#!/usr/bin/env python3
"""Hardening probes: the CLI and HTTP items that are one request or one command each.

Runs every probe below against BINARY on MODEL and prints one JSON line per probe
(what was tried, the outcome: handled / crashed / hung / wrong, and why), then a
summary line with the counts of docs/reliability.md's hardening table. A probe is
*handled* when the command or request got the expected answer: a refusal that names
the offending flag/field, or (for valid input) the same text as an independent run.

  /usr/bin/python3 tools/probe/small_items.py --binary build/moe --model models/tiny-mixtral-shakespeare

CLI: --threads 100000 (generate, serve); config.json max_position_embeddings 1e9 and
1e8 (a copy of MODEL); --fp8 native on a model without FP8 weights; --bogus; --top-p
1e-300 (must equal the greedy text). HTTP (one `moe serve`): top_p 1e-300 (equal to
greedy); errors with the parameter known (context length on both endpoints, top_k,
top_p 0) carry `param`; POST and DELETE with no body and no Content-Length answered
within 1 s.
"""
import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serve_probe_util as u  # noqa: E402

results = []


def record(name, outcome, detail):
    results.append(outcome)
    print(json.dumps({"probe": name, "outcome": outcome, "detail": detail[:300]}), flush=True)


def run_cli(name, args, expect_rc, needles, timeout=120):
    """A command that must exit with one of `expect_rc` and print every one of `needles`."""
    try:
        p = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        record(name, "hung", f"no exit within {timeout} s")
        return None
    out = p.stdout + p.stderr
    if p.returncode < 0 or p.returncode >= 128:
        record(name, "crashed", f"rc {p.returncode}: {out[-200:]}")
    elif p.returncode in expect_rc and all(n in out for n in needles):
        record(name, "handled", f"rc {p.returncode}: {out.strip().splitlines()[-1] if out.strip() else ''}")
    else:
        record(name, "wrong", f"rc {p.returncode}, expected {expect_rc} and {needles}: {out[-200:]}")
    return p


def model_with_config(model, tmp, key, value):
    d = os.path.join(tmp, f"{key}_{value}")
    os.makedirs(d)
    for f in os.listdir(model):
        if f != "config.json":
            os.symlink(os.path.abspath(os.path.join(model, f)), os.path.join(d, f))
    with open(os.path.join(model, "config.json")) as f:
        cfg = json.load(f)
    cfg[key] = value
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f)
    return d


def raw_request(port, text, timeout=5):
    """Sends `text` on a fresh connection; returns (first line of the answer, seconds)."""
    t0 = time.time()
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.sendall(text.encode())
    got = b""
    try:
        while b"\r\n" not in got:
            chunk = s.recv(4096)
            if not chunk:
                break
            got += chunk
    except socket.timeout:
        pass
    s.close()
    return got.split(b"\r\n")[0].decode(errors="replace"), time.time() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", required=True)
    ap.add_argument("--model", required=True)
    a = ap.parse_args()
    b, m = a.binary, a.model
    gen = [b, "generate", "--model", m]

    # --- CLI ---
    run_cli("generate --threads 100000", gen + ["--prompt", "x", "--max-tokens", "1", "--threads", "100000"],
            {1, 2}, ["--threads"])
    run_cli("serve --threads 100000", [b, "serve", "--model", m, "--port", str(u.free_port()), "--threads", "100000"],
            {1, 2}, ["--threads"])
    tmp = tempfile.mkdtemp(prefix="moe_small_items_")
    try:
        for v in (1000000000, 100000000):
            d = model_with_config(m, tmp, "max_position_embeddings", v)
            run_cli(f"max_position_embeddings {v}", [b, "generate", "--model", d, "--prompt", "x", "--max-tokens", "1",
                                                     "--threads", "1"], {1, 2}, ["max_position_embeddings", str(v)])
    finally:
        shutil.rmtree(tmp)
    run_cli("--fp8 native without FP8 weights", gen + ["--prompt", "x", "--max-tokens", "1", "--threads", "1",
                                                       "--fp8", "native"], {1, 2}, ["--fp8 native"])
    run_cli("generate --bogus", gen + ["--bogus"], {2}, ["--bogus"])
    greedy = subprocess.run(gen + ["--prompt", "ROMEO:", "--max-tokens", "8", "--threads", "1", "--temperature", "0"],
                            capture_output=True, text=True, timeout=120)
    tiny = run_cli("generate --top-p 1e-300", gen + ["--prompt", "ROMEO:", "--max-tokens", "8", "--threads", "1",
                                                     "--temperature", "0.9", "--seed", "5", "--top-p", "1e-300"],
                   {0}, [])
    if tiny is not None and tiny.returncode == 0:
        if tiny.stdout.split("[")[0] != greedy.stdout.split("[")[0] or greedy.returncode != 0:
            results[-1] = "wrong"
            print(json.dumps({"probe": "generate --top-p 1e-300", "outcome": "wrong",
                              "detail": f"{tiny.stdout!r} != greedy {greedy.stdout!r}"}))

    # --- HTTP ---
    proc, port = u.start_server(b, m, [], "/tmp/small_items_serve.log")
    name = os.path.basename(m.rstrip("/"))
    try:
        base = {"model": name, "prompt": "ROMEO:", "max_tokens": 8}
        code, body = u.post_json(port, "/v1/completions", dict(base, temperature=0))
        greedy_text = json.loads(body)["choices"][0]["text"] if code == 200 else None
        code, body = u.post_json(port, "/v1/completions", dict(base, temperature=0.9, seed=5, top_p=1e-300))
        text = json.loads(body)["choices"][0]["text"] if code == 200 else None
        record("HTTP top_p 1e-300", "handled" if code == 200 and text == greedy_text else "wrong",
               f"{code}: {text!r} vs greedy {greedy_text!r}")
        long_prompt = "ROMEO: " * 2000  # over the 512-token context, under the byte bound
        probes = [
            ("/v1/completions", dict(base, prompt=long_prompt), "prompt"),
            ("/v1/chat/completions", {"model": name, "max_tokens": 8,
                                      "messages": [{"role": "user", "content": long_prompt}]}, "messages"),
            ("/v1/completions", dict(base, top_k=-2), "top_k"),  # -1 is valid (no top-k)
            ("/v1/completions", dict(base, top_p=0), "top_p"),
        ]
        for path, req, param in probes:
            code, body = u.post_json(port, path, req)
            try:
                got = json.loads(body)["error"].get("param")
            except (ValueError, KeyError, TypeError):
                got = None
            record(f"param on {path} {param} error", "handled" if code == 400 and got == param else "wrong",
                   f"{code}, param {got!r}: {body[:150]!r}")
        for method, want in (("POST", "400"), ("DELETE", "405")):
            line, secs = raw_request(port, f"{method} /v1/completions HTTP/1.1\r\nHost: x\r\n\r\n")
            if not line:
                outcome = "hung"
            else:
                outcome = "handled" if want in line and secs < 1.0 else "wrong"
            record(f"{method} without body or Content-Length", outcome, f"{line!r} in {secs:.3f} s")
        if proc.poll() is not None:
            record("server alive after the probes", "crashed", f"rc {proc.returncode}")
    finally:
        u.stop_server(proc)

    counts = {k: results.count(k) for k in ("handled", "crashed", "hung", "wrong")}
    print(json.dumps({"tried": len(results), **counts}))
    return 0 if counts["handled"] == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
