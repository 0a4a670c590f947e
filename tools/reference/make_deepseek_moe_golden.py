"""Golden data for one whole DeepSeek-V3 MoE block (routed + shared experts), tiny-deepseek-v3-shakespeare (CC0).

Writes tests/data/golden/deepseek-v3-moe/:
  layer1.safetensors   the layer-1 MLP tensors only, copied bit-exactly (same names, same dtypes:
                       BF16 weights, F32 e_score_correction_bias) from the model's model.safetensors
  y.f32                expected MoE block output [96, 128] = y_routed + y_shared
  y_routed.f32         routed experts only: sum_j w_j * expert_{idx_j}(x)   [96, 128]
  y_shared.f32         shared expert only: shared_experts(x)                 [96, 128]
  cases.json           parameters, file names, shapes, per-token topk_idx / topk_weights, max |y|,
                       error estimates and a suggested tolerance (see tools/reference/README.md)
All .f32 files are raw float32 little-endian, row-major.

Input x [96, 128] is NOT copied: it is ../deepseek-v3-router/layer1.x.f32 (written by
make_deepseek_router_golden.py; BOS + 95 held-out Tiny Shakespeare tokens, RMSNorm(embedding) *
post_attention_layernorm of layer 1). cases.json records its path and sha256; this script checks both.

Independent float32 torch implementation (it does not import the router script; its routing is
cross-checked against deepseek-v3-router/cases.json, layer 1):
  s = sigmoid(x W_gate^T); b = s + e_score_correction_bias (selection only)
  group score = sum of the top-2 b in each of 4 groups of 4 consecutive experts; keep the best 2 groups,
  the others' b = -inf; idx = top-4 of b (descending b); w = s[idx] / (sum s[idx] + 1e-20) * 2.5
  expert_e(x) = down_e(silu(gate_e x) * up_e x)    (BF16 weights widened exactly to f32; width 64)
  y_routed = sum over the 4 slots in idx order of w_j * expert_{idx_j}(x)
  y_shared = shared_experts.down(silu(shared_experts.gate x) * shared_experts.up x)   (width 64, no gate)
  y = y_routed + y_shared
"""
import argparse
import hashlib
import json
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import safetensors_io  # noqa: E402

REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
MODEL_DIR = "/work/shared/models/tiny-deepseek-v3-shakespeare"
MODEL_SHA256 = "b79b8ec9d06503731ecd596f1842f714961009d598c7139e10e9be1ba2234d58"
GOLDEN = os.path.join(REPO, "tests", "data", "golden")
OUT = os.path.join(GOLDEN, "deepseek-v3-moe")
ROUTER_DIR = os.path.join(GOLDEN, "deepseek-v3-router")
LAYER = 1
X_REL = "../deepseek-v3-router/layer%d.x.f32" % LAYER

torch.set_num_threads(1)


def sha256_file(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def raw_tensors(path, names):
    """name -> (dtype, shape, raw little-endian bytes) straight from a safetensors file."""
    header, start = safetensors_io.read_header(path)
    out = {}
    with open(path, "rb") as f:
        for n in names:
            info = header[n]
            b, e = info["data_offsets"]
            f.seek(start + b)
            out[n] = (info["dtype"], list(info["shape"]), f.read(e - b))
    return out


def to_f32(dtype, shape, raw):
    if dtype == "BF16":
        a = safetensors_io.bf16_bits_to_f32(np.frombuffer(raw, dtype="<u2"))
    elif dtype == "F32":
        a = np.frombuffer(raw, dtype="<f4").astype(np.float32)
    else:
        raise ValueError(dtype)
    return torch.from_numpy(np.array(a, dtype=np.float32).reshape(shape))


def noaux_tc(x, w, bias, n_group, topk_group, k, scale):
    """DeepSeek-V3 routing with torch.topk (the router golden uses a stable sort instead)."""
    s = torch.sigmoid(x @ w.t())                                   # [T, E]
    b = s + bias.unsqueeze(0)
    T, E = s.shape
    gs = b.reshape(T, n_group, E // n_group).topk(2, dim=-1).values.sum(-1)   # [T, G]
    gidx = gs.topk(topk_group, dim=-1).indices                     # [T, topk_group]
    gmask = torch.zeros(T, n_group).scatter(1, gidx, 1.0).bool()
    emask = gmask.unsqueeze(-1).expand(T, n_group, E // n_group).reshape(T, E)
    bm = b.masked_fill(~emask, float("-inf"))
    idx = bm.topk(k, dim=-1).indices                               # descending b
    sw = s.gather(1, idx)
    wts = sw / (sw.sum(-1, keepdim=True) + 1e-20) * scale
    return idx, wts


def swiglu(x, wg, wu, wd):
    return (torch.nn.functional.silu(x @ wg.t()) * (x @ wu.t())) @ wd.t()


def moe(x, W, p, n_experts, idx, wts):
    """(y_routed, y_shared) for routing (idx, wts). Any float dtype (x and W must match)."""
    T = x.shape[0]
    # every expert on every token (tiny), then pick; the sum runs over slots in idx order
    allout = torch.stack([swiglu(x, W[p + "experts.%d.gate_proj.weight" % e],
                                 W[p + "experts.%d.up_proj.weight" % e],
                                 W[p + "experts.%d.down_proj.weight" % e]) for e in range(n_experts)])
    rows = torch.arange(T)
    y_routed = torch.zeros_like(x)
    for j in range(idx.shape[1]):
        y_routed = y_routed + wts[:, j:j + 1] * allout[idx[:, j], rows]
    y_shared = swiglu(x, W[p + "shared_experts.gate_proj.weight"], W[p + "shared_experts.up_proj.weight"],
                      W[p + "shared_experts.down_proj.weight"])
    return y_routed, y_shared


def moe_bf16_acts(x, W, p, n_experts, idx, wts):
    """Same, but x, gate/up outputs, the SwiGLU product and each expert output are rounded to bf16
    (an engine doing bf16 activations with f32 accumulation); used only to size a tolerance."""
    r = lambda t: torch.from_numpy(safetensors_io.round_to_bf16(t.numpy()))  # noqa: E731

    def sw(x, wg, wu, wd):
        h = r(r(torch.nn.functional.silu(r(x @ wg.t()))) * r(x @ wu.t()))
        return r(h @ wd.t())
    xb = r(x)
    T = x.shape[0]
    rows = torch.arange(T)
    allout = torch.stack([sw(xb, W[p + "experts.%d.gate_proj.weight" % e], W[p + "experts.%d.up_proj.weight" % e],
                             W[p + "experts.%d.down_proj.weight" % e]) for e in range(n_experts)])
    yr = torch.zeros_like(x)
    for j in range(idx.shape[1]):
        yr = yr + wts[:, j:j + 1] * allout[idx[:, j], rows]
    ys = sw(xb, W[p + "shared_experts.gate_proj.weight"], W[p + "shared_experts.up_proj.weight"],
            W[p + "shared_experts.down_proj.weight"])
    return yr + ys


def flat_json(d, indent=""):
    """Top-level keys one per line; values compact."""
    def val(v, ind):
        return json.dumps(v, separators=(",", ":"))
    items = ['%s  %s: %s' % (indent, json.dumps(k), val(v, indent)) for k, v in d.items()]
    return "{\n" + ",\n".join(items) + "\n" + indent + "}"


def f32_short(v):
    """float32 -> the shortest decimal that reads back (as double, then f32) to exactly v."""
    r = float(np.format_float_positional(np.float32(v), unique=True, trim="-"))
    assert np.float32(r) == np.float32(v)
    return r


def g7(v):
    return float("%.3g" % v)


def main():
    ap = argparse.ArgumentParser(description="DeepSeek-V3 MoE block golden data (layer 1)")
    ap.add_argument("--model-dir", default=MODEL_DIR)
    ap.add_argument("--out", default=OUT)
    a = ap.parse_args()

    st = os.path.join(a.model_dir, "model.safetensors")
    if sha256_file(st) != MODEL_SHA256:
        sys.exit("unexpected sha256 of %s" % st)
    with open(os.path.join(a.model_dir, "config.json")) as f:
        c = json.load(f)
    assert c["topk_method"] == "noaux_tc" and c["scoring_func"] == "sigmoid" and c["norm_topk_prob"]
    assert c["hidden_act"] == "silu" and c["n_shared_experts"] == 1
    E, K, H, I = c["n_routed_experts"], c["num_experts_per_tok"], c["hidden_size"], c["moe_intermediate_size"]
    G, TG, scale = c["n_group"], c["topk_group"], float(c["routed_scaling_factor"])
    I_sh = I * c["n_shared_experts"]

    p = "model.layers.%d.mlp." % LAYER
    names = [p + "gate.weight", p + "gate.e_score_correction_bias"]
    names += [p + "experts.%d.%s_proj.weight" % (e, m) for e in range(E) for m in ("gate", "up", "down")]
    names += [p + "shared_experts.%s_proj.weight" % m for m in ("gate", "up", "down")]
    raw = raw_tensors(st, names)
    assert raw[p + "gate.e_score_correction_bias"][0] == "F32"
    assert all(raw[n][0] == "BF16" for n in names if not n.endswith("e_score_correction_bias"))
    W = {n: to_f32(*raw[n]) for n in names}

    # input: the router golden's layer-1 x
    x_path = os.path.normpath(os.path.join(a.out, X_REL))
    router_cases = os.path.join(os.path.dirname(x_path), "cases.json")
    if not os.path.exists(x_path):
        sys.exit("missing %s; run make_deepseek_router_golden.py first" % x_path)
    x_sha = sha256_file(x_path)
    x = torch.from_numpy(np.fromfile(x_path, dtype="<f4").astype(np.float32))
    T = x.numel() // H
    x = x.reshape(T, H)
    assert T == 96

    # ---- compute (float32)
    with torch.no_grad():
        idx, wts = noaux_tc(x, W[p + "gate.weight"], W[p + "gate.e_score_correction_bias"], G, TG, K, scale)
        y_routed, y_shared = moe(x, W, p, E, idx, wts)
        y = y_routed + y_shared
        # float64 of the same math (same routing) -> size of the f32 rounding error
        W64 = {n: t.double() for n, t in W.items()}
        idx64, wts64 = noaux_tc(x.double(), W64[p + "gate.weight"], W64[p + "gate.e_score_correction_bias"],
                                G, TG, K, scale)
        assert torch.equal(idx64, idx)
        yr64, ys64 = moe(x.double(), W64, p, E, idx64, wts64)
        y64 = yr64 + ys64
        y_bf16 = moe_bf16_acts(x, W, p, E, idx, wts)

    # ---- cross-check the routing against the router golden (different implementation)
    with open(router_cases) as f:
        rc = json.load(f)
    rl = [l for l in rc["layers"] if l["layer"] == LAYER][0]
    assert rl["x_file"] == os.path.basename(X_REL)
    assert idx.tolist() == rl["topk_idx"], "routing differs from deepseek-v3-router"
    rw = torch.tensor(rl["topk_weights"], dtype=torch.float32)
    route_wdiff = float((rw - wts).abs().max())
    assert route_wdiff < 1e-6, route_wdiff

    err64 = float((y.double() - y64).abs().max())
    err_bf16 = float((y_bf16 - y).abs().max())
    max_y, max_yr, max_ys = (float(t.abs().max()) for t in (y, y_routed, y_shared))
    # suggested tolerances (abs): ~100x the observed f32 rounding error for f32 compute
    # (different summation order / fused kernels), and 2x the simulated bf16-activation error
    tol_f32 = float("%.1g" % max(100 * err64, 1e-5 * max_y))
    tol_bf16 = float("%.1g" % (2 * err_bf16))

    os.makedirs(a.out, exist_ok=True)

    # ---- layer1.safetensors: raw bytes, original names and dtypes
    st_out = os.path.join(a.out, "layer%d.safetensors" % LAYER)
    tens, dts = {}, {}
    for n in names:
        dt, shape, b = raw[n]
        arr = np.frombuffer(b, dtype="<u2" if dt == "BF16" else "<f4").reshape(shape)
        tens[n], dts[n] = arr, dt
    safetensors_io.save_file(tens, st_out, dtype=dts, metadata={"format": "pt"})
    back = raw_tensors(st_out, names)
    hdr, _ = safetensors_io.read_header(st_out)
    assert set(hdr) - {"__metadata__"} == set(names)
    for n in names:
        assert back[n] == raw[n], "not bit-exact: " + n

    def save(fname, t):
        np.ascontiguousarray(t.numpy(), dtype="<f4").tofile(os.path.join(a.out, fname))
        return fname

    doc = {
        "description": "DeepSeek-V3 MoE block golden, see tools/reference/README.md",
        "source_model": "tiny-deepseek-v3-shakespeare (CC0-1.0), sha256 " + MODEL_SHA256,
        "dtype": "raw f32 LE, row-major",
        "layer": LAYER,
        "weights_file": os.path.basename(st_out),
        "weights_prefix": p,
        "hidden_size": H,
        "moe_intermediate_size": I,
        "shared_intermediate_size": I_sh,
        "routing": {"scoring_func": "sigmoid", "topk_method": "noaux_tc", "n_routed_experts": E,
                    "num_experts_per_tok": K, "n_group": G, "topk_group": TG,
                    "group_score": "sum of top-2 biased",
                    "masked_groups_fill": "-inf", "norm_topk_prob": True, "norm_eps": 1e-20,
                    "routed_scaling_factor": scale,
                    "bias_use": "selection only"},
        "expert": "down(silu(gate x) * up x), f32",
        "output": "sum_j topk_weights[j] expert_{topk_idx[j]}(x) + shared(x)",
        "n_tokens": T,
        "x_file": X_REL,
        "x_sha256": x_sha,
        "x_shape": [T, H],
        "y_file": save("y.f32", y),
        "y_routed_file": save("y_routed.f32", y_routed),
        "y_shared_file": save("y_shared.f32", y_shared),
        "y_shape": [T, H],
        "max_abs_y": f32_short(max_y),
        "max_abs_y_routed": f32_short(max_yr),
        "max_abs_y_shared": f32_short(max_ys),
        "f32_vs_f64_max_abs_diff": g7(err64),
        "bf16_act_max_abs_diff": g7(err_bf16),
        "suggested_atol_f32": tol_f32,
        "suggested_atol_bf16_act": tol_bf16,
        "min_topk_margin": g7(min(rl["topk_margin"])),
        "min_group_margin": g7(min(rl["group_margin"])),
        "topk_idx": idx.tolist(),
        "topk_weights": [[f32_short(v) for v in row] for row in wts.numpy()],
    }
    with open(os.path.join(a.out, "cases.json"), "w") as f:
        f.write(flat_json(doc) + "\n")
    files = sorted(os.listdir(a.out))
    size = sum(os.path.getsize(os.path.join(a.out, fn)) for fn in files)
    print("max |y| %.4f  |y_routed| %.4f  |y_shared| %.4f" % (max_y, max_yr, max_ys))
    print("f32 vs f64 max diff %.2e, bf16-activation max diff %.2e -> atol f32 %g, bf16 %g"
          % (err64, err_bf16, tol_f32, tol_bf16))
    print("routing matches deepseek-v3-router layer %d (max weight diff %.1e); expert counts %s"
          % (LAYER, route_wdiff, torch.bincount(idx.flatten(), minlength=E).tolist()))
    print("wrote %s (%d files, %d bytes)" % (a.out, len(files), size))


if __name__ == "__main__":
    main()
