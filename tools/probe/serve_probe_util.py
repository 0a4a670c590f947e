"""Shared helpers of the hardening probes (tools/probe/*.py): start `moe serve` on a free
port, wait for /health, read a process's RSS, small HTTP requests with a timeout."""
import http.client
import json
import os
import signal
import socket
import subprocess
import time


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def start_server(binary, model, extra=(), log_path=None):
    """Starts `binary serve` on a free port; returns (process, port) once /health is 200."""
    port = free_port()
    log = open(log_path or os.devnull, "wb")
    proc = subprocess.Popen([binary, "serve", "--model", model, "--port", str(port), "--threads", "1", *extra],
                            stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + 120
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"moe serve exited with {proc.returncode} (log: {log_path})")
        try:
            if get(port, "/health", timeout=1)[0] == 200:
                return proc, port
        except OSError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError("moe serve did not become healthy in 120 s")


def stop_server(proc):
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def rss_kb(pid):
    """(VmRSS, VmHWM) of `pid` in KiB."""
    fields = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            fields[key] = value.strip()
    return int(fields["VmRSS"].split()[0]), int(fields["VmHWM"].split()[0])


def get(port, path, timeout=5):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    c.request("GET", path)
    r = c.getresponse()
    body = r.read()
    c.close()
    return r.status, body


def post_json(port, path, obj, timeout=30):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    body = json.dumps(obj).encode()
    c.request("POST", path, body=body, headers={"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, data
