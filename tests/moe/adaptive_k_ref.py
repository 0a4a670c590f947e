"""Independent torch reference for adaptive top-k and adaptive_requeue on one MoE layer of
a Mixtral or DeepSeek-V3 model (adaptive_k_layer_test.cc).

Written from the rules in src/moe/moe/adaptive_k.h and capacity.h, in float32 torch,
vectorised (no code shared with the engine):
  router: softmax over all experts in f32 -> top-k (ties to the lower id) -> weights
  renormalised to sum 1 (transformers MixtralSparseMoeBlock); DeepSeek-V3: the router of
  tools/reference/deepseek_ref.py (sigmoid, bias for selection, groups, weights over their
  sum times routed_scaling_factor), routed experts only (the shared one is the decoder's);
  adaptive k: slots >= max_k removed; load target L = ceil(T * max_k * F / E); each
  expert with load n_e > L sheds min(n_e - L, candidates) of its assignments in slots
  >= min_k, smallest share w / sum(w) first, ties: the later (token, slot) first; the
  kept weights renormalised to the token's original sum;
  capacity (drop / adaptive_requeue): C = ceil(T * k_eff * F_cap / E) clamped to T,
  admission in (token, slot) order; adaptive_requeue gives the overflow a second round on
  its own expert while sum_e (C - admitted_e) lasts and the expert has taken < C in it.
  y[t] = sum over kept slots of w * w2(silu(w1 x) * w3 x).

usage: python3 adaptive_k_ref.py IN.json OUT.json
  IN: {"model_dir", "layer", "x_file" (f32 [T, hidden]), "cases": [{"adaptive": null or
       {"min_k", "max_k", "target"}, "policy": "dropless"|"drop"|"adaptive_requeue",
       "capacity_factor", "y_file"}]}
  OUT: per case {"topk_idx": [[...]], "shed": n, "requeued": n, "dropped": n}; y to y_file.
"""
import json
import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "reference"))
import deepseek_ref  # noqa: E402
import safetensors_io  # noqa: E402


def route(x, gate, k):
    probs = torch.softmax(x @ gate.T, dim=-1)
    # Stable descending order: ties to the lower expert id.
    order = torch.from_numpy(np.argsort(-probs.numpy(), axis=1, kind="stable")[:, :k].copy())
    w = torch.gather(probs, 1, order)
    return order, w / w.sum(dim=1, keepdim=True)


def adaptive_k(idx, w, E, min_k, max_k, target):
    T, k = idx.shape
    idx, w = idx.clone(), w.clone()
    before = w.sum(dim=1, keepdim=True)
    idx[:, max_k:] = -1
    w[:, max_k:] = 0
    w = w * (before / w.sum(dim=1, keepdim=True))
    L = math.ceil(T * max_k * target / E)
    live = idx >= 0
    load = torch.bincount(idx[live], minlength=E)
    share = w / w.sum(dim=1, keepdim=True)
    pos = torch.arange(T * k).reshape(T, k)  # global (token, slot) order
    shed = torch.zeros_like(live)
    slot = torch.arange(k).expand(T, k)
    for e in range(E):
        if load[e] <= L:
            continue
        cand = (idx == e) & (slot >= min_k)
        s, p = share[cand], pos[cand]
        # Sort by (share ascending, position descending): lexsort's last key is primary.
        order = np.lexsort((-p.numpy(), s.numpy()))
        n = min(int(load[e] - L), len(order))
        chosen = p[torch.from_numpy(order[:n].copy())]
        shed.view(-1)[chosen] = True
    n_shed = int(shed.sum())
    tok_before = w.sum(dim=1, keepdim=True)
    idx[shed] = -1
    w[shed] = 0
    kept = w.sum(dim=1, keepdim=True)
    w = torch.where(shed.any(dim=1, keepdim=True), w * (tok_before / kept), w)
    return idx, w, n_shed


def capacity(idx, w, E, k_eff, factor, policy):
    T, k = idx.shape
    idx, w = idx.clone(), w.clone()
    C = min(math.ceil(T * k_eff * factor / E), T)
    admitted = [0] * E
    overflow = []
    for t in range(T):
        for j in range(k):
            e = int(idx[t, j])
            if e < 0:
                continue
            if admitted[e] < C:
                admitted[e] += 1
            else:
                overflow.append((t, j, e))
    budget = sum(C - a for a in admitted)
    second = [0] * E
    requeued = dropped = 0
    for t, j, e in overflow:
        if policy == "adaptive_requeue" and budget > 0 and second[e] < C:
            budget -= 1
            second[e] += 1
            requeued += 1
        else:
            idx[t, j] = -1
            w[t, j] = 0
            dropped += 1
    return idx, w, requeued, dropped


def main():
    spec = json.load(open(sys.argv[1]))
    cfg = json.load(open(os.path.join(spec["model_dir"], "config.json")))
    k = cfg["num_experts_per_tok"]
    if cfg["model_type"].startswith("deepseek"):
        model = deepseek_ref.load_model(spec["model_dir"])
        layer = model.layers[spec["layer"]]
        E, hidden = layer["gate"].shape
        router = lambda x: model.route(layer, x)  # noqa: E731
        experts = [(g, d, u) for g, u, d in layer["experts"]]  # as (w1, w2, w3)
    else:
        tensors = safetensors_io.load_checkpoint(spec["model_dir"])
        p = "model.layers.%d.block_sparse_moe." % spec["layer"]
        gate = torch.from_numpy(tensors[p + "gate.weight"])
        E, hidden = gate.shape
        router = lambda x: route(x, gate, k)  # noqa: E731
        experts = [tuple(torch.from_numpy(tensors[p + "experts.%d.%s.weight" % (e, n)]) for n in ("w1", "w2", "w3"))
                   for e in range(E)]
    x = torch.from_numpy(np.fromfile(spec["x_file"], dtype=np.float32).reshape(-1, hidden))
    out = []
    for case in spec["cases"]:
        idx, w = router(x)
        shed, k_eff = 0, k
        a = case["adaptive"]
        if a is not None:
            idx, w, shed = adaptive_k(idx, w, E, a["min_k"], a["max_k"], a["target"])
            k_eff = a["max_k"]
        requeued = dropped = 0
        if case["policy"] != "dropless":
            idx, w, requeued, dropped = capacity(idx, w, E, k_eff, case["capacity_factor"], case["policy"])
        y = torch.zeros_like(x)
        for e, (w1, w2, w3) in enumerate(experts):
            rows, slots = (idx == e).nonzero(as_tuple=True)
            if len(rows) == 0:
                continue
            h = torch.nn.functional.silu(x[rows] @ w1.T) * (x[rows] @ w3.T)
            y.index_add_(0, rows, (h @ w2.T) * w[rows, slots].unsqueeze(1))
        y.numpy().astype(np.float32).tofile(case["y_file"])
        out.append({"topk_idx": idx.tolist(), "shed": shed, "requeued": requeued, "dropped": dropped})
    json.dump(out, open(sys.argv[2], "w"))


if __name__ == "__main__":
    main()
