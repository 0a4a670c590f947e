"""Independent reference for degraded-mode routing (router_degraded_test.cc).

Reads a JSON list of cases, each {"router": {...}, "logits": [[...]], "bias": [...] or null,
"alive": [0/1 per expert]}, and writes, per case, the masked routing: topk_idx,
topk_weights, ranked, degraded_tokens and wanted_dead. Written from the model code's
definitions (transformers MixtralSparseMoeBlock, Qwen2MoeSparseMoeBlock,
DeepseekV3TopkRouter, DeepSeek-V2 group_limited_greedy) in numpy float64, with dead
experts' selection scores set to -inf before the group scores. A group's score sums its
best 2 (noaux_tc) or best 1 (group_limited_greedy) live scores, fewer when fewer are
live; a group with none ranks last; groups are added beyond topk_group while the kept
ones hold fewer than top_k live experts. Ties go to the lower expert / group id.

usage: python3 masked_router_ref.py IN.json OUT.json
"""
import json
import sys

import numpy as np


def order_desc(v):
    # Descending, ties to the lower index (stable sort of the negated values).
    return np.argsort(-v, kind="stable")


def limit_groups(sel, r):
    E = sel.shape[0]
    n_group = r["n_group"]
    if r["topk_method"] == "greedy" or n_group <= 1:
        return sel
    per = E // n_group
    top = 2 if r["topk_method"] == "noaux_tc" else 1
    scores, live = [], []
    for g in range(n_group):
        vals = sel[g * per:(g + 1) * per]
        ok = np.sort(vals[np.isfinite(vals)])[::-1]
        live.append(len(ok))
        scores.append(ok[:top].sum() if len(ok) else -np.inf)
    # Groups with live experts first, by score descending, ties to the lower id.
    order = sorted(range(n_group), key=lambda g: (live[g] == 0, -scores[g] if live[g] else 0.0, g))
    kept, have = set(), 0
    for i, g in enumerate(order):
        if i < r["topk_group"] or have < r["top_k"]:
            kept.add(g)
            have += live[g]
        else:
            break
    out = sel.copy()
    for e in range(E):
        if e // per not in kept:
            out[e] = -np.inf
    return out


def route_token(logits, bias, alive, r):
    E, k = logits.shape[0], r["top_k"]
    if r["scoring"] == "softmax":
        z = np.exp(logits - logits.max())
        s = z / z.sum()  # over ALL experts, dead ones included
    else:
        s = 1.0 / (1.0 + np.exp(-logits))
    sel = s + (bias if bias is not None else 0.0)
    sel = np.where(alive > 0, sel, -np.inf)
    sel = limit_groups(sel, r)
    order = order_desc(sel)
    idx = order[:k]
    p = s[idx]
    if r["norm_topk_prob"]:
        p = p / (p.sum() + (1e-20 if r["scoring"] == "sigmoid" else 0.0))
    w = p * r["routed_scaling_factor"]
    ranked = [int(e) if np.isfinite(sel[e]) else -1 for e in order]
    return [int(e) for e in idx], [float(x) for x in w], ranked


def main():
    cases = json.load(open(sys.argv[1]))
    out = []
    for c in cases:
        r = c["router"]
        logits = np.array(c["logits"], dtype=np.float64)
        bias = None if c["bias"] is None else np.array(c["bias"], dtype=np.float64)
        alive = np.array(c["alive"], dtype=np.int64)
        E = logits.shape[1]
        res = {"topk_idx": [], "topk_weights": [], "ranked": [], "degraded_tokens": 0, "wanted_dead": [0] * E}
        for row in logits:
            idx, w, ranked = route_token(row, bias, alive, r)
            res["topk_idx"].append(idx)
            res["topk_weights"].append(w)
            res["ranked"].append(ranked)
            full, _, _ = route_token(row, bias, np.ones(E, dtype=np.int64), r)
            dead = [e for e in full if alive[e] == 0]
            res["degraded_tokens"] += 1 if dead else 0
            for e in dead:
                res["wanted_dead"][e] += 1
        out.append(res)
    json.dump(out, open(sys.argv[2], "w"))


if __name__ == "__main__":
    main()
