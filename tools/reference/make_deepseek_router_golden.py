"""Golden cases for the DeepSeek-V3 `noaux_tc` router, from tiny-deepseek-v3-shakespeare (CC0).

Writes tests/data/golden/deepseek-v3-router/:
  cases.json                              routing parameters, inputs, file names, shapes,
                                          expected top-k per layer (see README.md there)
  layer{L}.gate_weight.f32                model.layers.{L}.mlp.gate.weight [16, 128] (bf16 -> f32)
  layer{L}.e_score_correction_bias.f32    model.layers.{L}.mlp.gate.e_score_correction_bias [16]
  layer{L}.x.f32                          router inputs [96, 128]
  layer{L}.scores.f32                     s = sigmoid(x W^T) [96, 16] (for debugging the matmul)
for L in 1, 2, 3; all raw float32 little-endian, row-major.

Router inputs (not real residual-stream states; the routing math does not care): the 96 token
ids are BOS + the first 95 sentencepiece tokens of the held-out Tiny Shakespeare text (char
offset 1059636); x[t] = RMSNorm(embed_tokens[id_t]) * post_attention_layernorm.weight of layer L
(eps = rms_norm_eps 1e-6, float32), i.e. what the router would see if the token's attention and
earlier-layer outputs were zero.

Routing (independent torch implementation of DeepSeek-V3 noaux_tc, float32):
  s = sigmoid(x @ W^T)                         [T, 16]
  b = s + e_score_correction_bias              (selection only)
  group score = sum of the 2 largest b in each of n_group=4 groups of 4 consecutive experts
  keep the topk_group=2 best groups; experts of the other groups get b = -inf
  topk_idx = the 4 largest b, in descending b order
  topk_weights = s[topk_idx] / (sum(s[topk_idx]) + 1e-20) * routed_scaling_factor (2.5)
Ties (equal values) are broken towards the lower expert / group index (stable descending sort);
the per-token selection margins stored in cases.json show how far each token is from a tie.
"""
import argparse
import hashlib
import json
import os
import sys

import numpy as np
import sentencepiece as spm
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import safetensors_io  # noqa: E402

REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
MODEL_DIR = "/work/shared/models/tiny-deepseek-v3-shakespeare"
MODEL_SHA256 = "b79b8ec9d06503731ecd596f1842f714961009d598c7139e10e9be1ba2234d58"
SHAKESPEARE = "/work/shared/data/tinyshakespeare.txt"
HELDOUT_OFFSET = 1059636
OUT = os.path.join(REPO, "tests", "data", "golden", "deepseek-v3-router")
LAYERS = (1, 2, 3)
N_TOKENS = 96
BOS = 1

torch.set_num_threads(2)


def stable_desc(v):
    """indices sorting v (last dim) descending; equal values keep ascending index order."""
    return torch.sort(v, dim=-1, descending=True, stable=True).indices


def route(x, w, bias, n_group, topk_group, top_k, scale, use_bias=True, group_limit=True,
          fill=float("-inf")):
    """noaux_tc routing. Returns (idx [T,k] long, weights [T,k] f32, s [T,E], margins dict)."""
    s = torch.sigmoid(x @ w.t())
    b = s + bias if use_bias else s.clone()
    T, E = b.shape
    per = E // n_group
    gmargin = torch.full((T,), float("inf"))
    if group_limit:
        grouped = b.view(T, n_group, per)
        top2 = torch.gather(grouped, -1, stable_desc(grouped)[..., :2])
        gscore = top2.sum(-1)                          # [T, n_group]
        gorder = stable_desc(gscore)
        keep = torch.zeros(T, n_group, dtype=torch.bool)
        keep.scatter_(1, gorder[:, :topk_group], True)
        gs = torch.gather(gscore, 1, gorder)
        gmargin = gs[:, topk_group - 1] - gs[:, topk_group]
        mask = keep.repeat_interleave(per, dim=1)       # [T, E]
        b = torch.where(mask, b, torch.full_like(b, fill))
    order = stable_desc(b)
    idx = order[:, :top_k]
    bs = torch.gather(b, 1, order)
    kmargin = bs[:, top_k - 1] - bs[:, top_k]
    sw = torch.gather(s, 1, idx)
    weights = sw / (sw.sum(-1, keepdim=True) + 1e-20) * scale
    return idx, weights, s, {"topk": kmargin, "group": gmargin}


def rms_norm(x, w, eps):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def sets_differ(a, b):
    return [t for t in range(a.shape[0]) if set(a[t].tolist()) != set(b[t].tolist())]


def flat_json(d, indent=""):
    """Objects one key per line (recursing into lists of objects); other values compact."""
    def val(v, ind):
        if isinstance(v, dict):
            return flat_json(v, ind + "  ")
        if isinstance(v, list) and v and isinstance(v[0], dict):
            inner = ind + "    "
            return "[\n" + ",\n".join(inner + flat_json(e, inner) for e in v) + "\n" + ind + "  ]"
        return json.dumps(v, separators=(",", ":"))
    items = ['%s  %s: %s' % (indent, json.dumps(k), val(v, indent)) for k, v in d.items()]
    return "{\n" + ",\n".join(items) + "\n" + indent + "}"


def main():
    ap = argparse.ArgumentParser(description="DeepSeek-V3 noaux_tc router golden cases")
    ap.add_argument("--model-dir", default=MODEL_DIR)
    ap.add_argument("--out", default=OUT)
    a = ap.parse_args()

    st = os.path.join(a.model_dir, "model.safetensors")
    with open(st, "rb") as f:
        sha = hashlib.sha256(f.read()).hexdigest()
    if sha != MODEL_SHA256:
        sys.exit("unexpected %s sha256 %s" % (st, sha))
    with open(os.path.join(a.model_dir, "config.json")) as f:
        c = json.load(f)
    assert c["topk_method"] == "noaux_tc" and c["scoring_func"] == "sigmoid" and c["norm_topk_prob"]
    E, K = c["n_routed_experts"], c["num_experts_per_tok"]
    G, TG, scale, eps = c["n_group"], c["topk_group"], float(c["routed_scaling_factor"]), c["rms_norm_eps"]
    H = c["hidden_size"]

    names = {"model.embed_tokens.weight"}
    for L in LAYERS:
        p = "model.layers.%d." % L
        names |= {p + "post_attention_layernorm.weight", p + "mlp.gate.weight",
                  p + "mlp.gate.e_score_correction_bias"}
    raw, _ = safetensors_io.load_file(st, names=names)
    T = {k: torch.from_numpy(np.array(v, dtype=np.float32)) for k, v in raw.items()}

    sp = spm.SentencePieceProcessor(model_file=os.path.join(a.model_dir, "tokenizer.model"))
    text = open(SHAKESPEARE, encoding="utf-8").read()[HELDOUT_OFFSET:HELDOUT_OFFSET + 2000]
    ids = [BOS] + sp.encode(text)[: N_TOKENS - 1]
    assert len(ids) == N_TOKENS
    emb = T["model.embed_tokens.weight"][torch.tensor(ids)]

    os.makedirs(a.out, exist_ok=True)

    def save(fname, t):
        np.ascontiguousarray(t.numpy(), dtype="<f4").tofile(os.path.join(a.out, fname))
        return fname

    layers = []
    for L in LAYERS:
        p = "model.layers.%d." % L
        w = T[p + "mlp.gate.weight"]
        bias = T[p + "mlp.gate.e_score_correction_bias"]
        with torch.no_grad():
            x = rms_norm(emb, T[p + "post_attention_layernorm.weight"], eps)
            idx, wts, s, marg = route(x, w, bias, G, TG, K, scale)
            idx_nb, _, _, _ = route(x, w, bias, G, TG, K, scale, use_bias=False)
            idx_ng, _, _, _ = route(x, w, bias, G, TG, K, scale, group_limit=False)
            idx_z, _, _, _ = route(x, w, bias, G, TG, K, scale, fill=0.0)
        assert tuple(idx.shape) == (N_TOKENS, K)
        assert torch.isfinite(wts).all() and torch.allclose(wts.sum(-1), torch.full((N_TOKENS,), scale))
        d_nb, d_ng, d_z = sets_differ(idx, idx_nb), sets_differ(idx, idx_ng), sets_differ(idx, idx_z)
        counts = torch.bincount(idx.flatten(), minlength=E).tolist()
        rec = {
            "layer": L,
            "gate_weight_file": save("layer%d.gate_weight.f32" % L, w),
            "gate_weight_shape": [E, H],
            "gate_weight_tensor": p + "mlp.gate.weight",
            "bias_file": save("layer%d.e_score_correction_bias.f32" % L, bias),
            "bias_shape": [E],
            "bias_tensor": p + "mlp.gate.e_score_correction_bias",
            "x_file": save("layer%d.x.f32" % L, x),
            "x_shape": [N_TOKENS, H],
            "scores_file": save("layer%d.scores.f32" % L, s),
            "scores_shape": [N_TOKENS, E],
            "topk_idx": idx.tolist(),
            "topk_weights": [[float(v) for v in row] for row in wts.tolist()],
            "topk_margin": [float("%.7g" % v) for v in marg["topk"].tolist()],
            "group_margin": [float("%.7g" % v) for v in marg["group"].tolist()],
            "expert_counts": counts,
            "n_changed_set_without_bias": len(d_nb),
            "tokens_changed_without_bias": d_nb,
            "n_changed_set_without_group_limit": len(d_ng),
            "tokens_changed_without_group_limit": d_ng,
            "n_changed_set_with_zero_fill": len(d_z),
            "tokens_changed_with_zero_fill": d_z,
        }
        layers.append(rec)
        print("layer %d: min topk margin %.2e, min group margin %.2e, expert counts %s; "
              "set changes: no bias %d/%d, no group limit %d/%d, 0.0 fill %d/%d"
              % (L, min(rec["topk_margin"]), min(rec["group_margin"]), counts,
                 len(d_nb), N_TOKENS, len(d_ng), N_TOKENS, len(d_z), N_TOKENS))

    doc = {
        "description": "DeepSeek-V3 noaux_tc router golden cases (generator: "
                       "tools/reference/make_deepseek_router_golden.py; format: tools/reference/README.md)",
        "source_model": "tiny-deepseek-v3-shakespeare (CC0-1.0), model.safetensors sha256 " + MODEL_SHA256,
        "dtype": "all .f32 files: float32 little-endian, row-major, no header",
        "routing": {"scoring_func": "sigmoid", "topk_method": "noaux_tc", "n_routed_experts": E,
                    "num_experts_per_tok": K, "n_group": G, "topk_group": TG,
                    "group_score": "sum of the 2 largest biased scores in the group",
                    "masked_groups_fill": "-inf", "norm_topk_prob": True, "norm_eps": 1e-20,
                    "routed_scaling_factor": scale,
                    "bias_use": "selection only; weights use the unbiased sigmoid scores",
                    "topk_order": "descending biased score; ties -> lower expert index first",
                    "group_tie_break": "lower group index first"},
        "inputs": "x[t] = RMSNorm(embed_tokens[token_ids[t]]; eps %g) * "
                  "model.layers.L.post_attention_layernorm.weight, float32" % eps,
        "token_ids": ids,
        "token_text_source": "BOS + first %d tokens of tinyshakespeare.txt from char offset %d"
                             % (N_TOKENS - 1, HELDOUT_OFFSET),
        "n_tokens": N_TOKENS,
        "hidden_size": H,
        "fields": {"topk_idx": "[n_tokens][k] expert ids, descending biased score",
                   "topk_weights": "[n_tokens][k] float32 values (exact as decimal), same order",
                   "topk_margin": "k-th minus (k+1)-th biased score among kept groups, per token",
                   "group_margin": "topk_group-th minus next group score, per token",
                   "n_changed_set_without_bias": "tokens whose expert set differs when the bias is 0",
                   "n_changed_set_without_group_limit": "... when all 16 experts compete (plain top-4 of b)",
                   "n_changed_set_with_zero_fill": "... when dropped groups are filled with 0.0 "
                                                   "(transformers' masked_fill) instead of -inf"},
        "layers": layers,
    }
    with open(os.path.join(a.out, "cases.json"), "w") as f:
        f.write(flat_json(doc) + "\n")
    size = sum(os.path.getsize(os.path.join(a.out, f)) for f in os.listdir(a.out))
    print("wrote %s (%d files, %d bytes)" % (a.out, len(os.listdir(a.out)), size))


if __name__ == "__main__":
    main()
