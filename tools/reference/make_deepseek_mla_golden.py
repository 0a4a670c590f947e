"""Golden data for one MLA attention block in isolation (tiny-deepseek-v3-shakespeare, layer 1).

Writes tests/data/golden/deepseek-v3-mla/ (all .f32 raw float32 little-endian, row-major):
  x.f32                 [20, 128] the block input: input_layernorm of layer 1 applied to the
                        residual stream entering layer 1, for BOS + the first 19 held-out
                        Tiny Shakespeare tokens (char offset 1059636), positions 0..19
  out.f32               [20, 128] the attention block output (after o_proj), model config
                        (rope_scaling null, softmax scale 48^-0.5)
  latent.f32            [20, 48]  what a latent KV cache holds per token:
                        [kv_a_layernorm(c_kv) (32) | RoPE'd k_rope (16)], interleaved RoPE
  out_yarn.f32, latent_yarn.f32   the same with rope_scaling YaRN (factor 4,
                        original_max_position_embeddings 128, beta_fast 32, beta_slow 1,
                        mscale 1, mscale_all_dim 1) applied to the same weights and x
  cases.json            the variants, shapes, softmax scales, inv_freq, attention factors,
                        max |out|, the f32-vs-f64 difference and a suggested tolerance
The weights are not copied: they are `model.layers.1.self_attn.*` of
models/tiny-deepseek-v3-shakespeare/model.safetensors (sha256 checked).

out / latent come from deepseek_ref.py (float32). They are cross-checked here against a
separate float64 numpy implementation written the way transformers' modeling_deepseek_v3.py
does it (rope dims de-interleaved to [x0, x2, .., x1, x3, ..], then rotate_half), which must
agree to ~1e-6; the script fails otherwise.
"""
import hashlib
import json
import math
import os
import sys

import numpy as np
import sentencepiece as spm
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import deepseek_ref  # noqa: E402
import safetensors_io  # noqa: E402

REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
MODEL_REL = "models/tiny-deepseek-v3-shakespeare"
MODEL_DIR = os.path.join(REPO, MODEL_REL)
MODEL_SHA256 = "b79b8ec9d06503731ecd596f1842f714961009d598c7139e10e9be1ba2234d58"
OUT = os.path.join(REPO, "tests", "data", "golden", "deepseek-v3-mla")
SHAKESPEARE = "/work/shared/data/tinyshakespeare.txt"
HELDOUT_OFFSET = 1059636
LAYER = 1
T = 20
YARN = {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 128, "beta_fast": 32.0,
        "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0}


def sha256_file(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


# ----------------------------------------------------------- float64 cross-check (HF style)
def hf_style_inv_freq(c, dim):
    base = c["rope_theta"]
    inv = 1.0 / base ** (np.arange(0, dim, 2) / dim)
    rs = c.get("rope_scaling")
    if not rs:
        return inv, 1.0
    f = rs["factor"]
    corr = [dim * math.log(rs["original_max_position_embeddings"] / (b * 2 * math.pi)) / (2 * math.log(base))
            for b in (rs["beta_fast"], rs["beta_slow"])]
    lo, hi = max(math.floor(corr[0]), 0), min(math.ceil(corr[1]), dim - 1)
    hi = hi + 0.001 if lo == hi else hi
    lin = np.clip((np.arange(dim // 2) - lo) / (hi - lo), 0, 1)
    inv = (inv / f) * lin + inv * (1 - lin)
    ms = lambda s, m: 1.0 if s <= 1 else 0.1 * m * math.log(s) + 1.0  # noqa: E731
    return inv, ms(f, rs["mscale"]) / ms(f, rs["mscale_all_dim"])


def hf_style_attention(c, W, x):
    """float64 numpy MLA, transformers modeling_deepseek_v3 style. x [T, H] -> (out, latent)."""
    x = x.astype(np.float64)
    nh, nope, r, dv, rank = (c["num_attention_heads"], c["qk_nope_head_dim"], c["qk_rope_head_dim"],
                             c["v_head_dim"], c["kv_lora_rank"])
    eps = c["rms_norm_eps"]
    norm = lambda v, w: w * v / np.sqrt((v * v).mean(-1, keepdims=True) + eps)  # noqa: E731
    n = x.shape[0]
    q = norm(x @ W["q_a_proj"].T, W["q_a_layernorm"]) @ W["q_b_proj"].T
    q = q.reshape(n, nh, nope + r).transpose(1, 0, 2)
    ckv = x @ W["kv_a_proj_with_mqa"].T
    c_kv, k_pe = norm(ckv[:, :rank], W["kv_a_layernorm"]), ckv[:, rank:]
    kv = (c_kv @ W["kv_b_proj"].T).reshape(n, nh, nope + dv).transpose(1, 0, 2)
    inv, att = hf_style_inv_freq(c, r)
    fr = np.arange(n)[:, None] * inv[None, :]
    emb = np.concatenate([fr, fr], -1)
    cos, sin = np.cos(emb) * att, np.sin(emb) * att

    def rope(t):  # de-interleave then rotate_half
        t = np.concatenate([t[..., 0::2], t[..., 1::2]], -1)
        rot = np.concatenate([-t[..., r // 2:], t[..., : r // 2]], -1)
        return t * cos + rot * sin

    q_pe, k_pe = rope(q[..., nope:]), rope(k_pe)
    qf = np.concatenate([q[..., :nope], q_pe], -1)
    kf = np.concatenate([kv[..., :nope], np.broadcast_to(k_pe, (nh, n, r))], -1)
    scale = (nope + r) ** -0.5
    rs = c.get("rope_scaling")
    if rs and rs.get("mscale_all_dim"):
        m = 0.1 * rs["mscale_all_dim"] * math.log(rs["factor"]) + 1.0
        scale *= m * m
    s = qf @ kf.transpose(0, 2, 1) * scale + np.triu(np.full((n, n), -np.inf), 1)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    o = (p @ kv[..., nope:]).transpose(1, 0, 2).reshape(n, nh * dv) @ W["o_proj"].T
    # latent in the interleaved (DeepSeek) order: re-interleave the HF-ordered rope key
    k_il = np.empty_like(k_pe)
    k_il[:, 0::2], k_il[:, 1::2] = k_pe[:, : r // 2], k_pe[:, r // 2:]
    return o, np.concatenate([c_kv, k_il], -1)


def main():
    path = os.path.join(MODEL_DIR, "model.safetensors")
    if sha256_file(path) != MODEL_SHA256:
        sys.exit("unexpected sha256 of %s" % path)
    sp = spm.SentencePieceProcessor(model_file=os.path.join(MODEL_DIR, "tokenizer.model"))
    text = open(SHAKESPEARE, encoding="utf-8").read()[HELDOUT_OFFSET:HELDOUT_OFFSET + 2000]
    ids = [1] + sp.encode(text)[: T - 1]
    base = deepseek_ref.load_model(MODEL_DIR)
    L = base.layers[LAYER]
    with torch.no_grad():
        h = base.layer_input(ids, LAYER)
        x = deepseek_ref.rms_norm(h, L["in_norm"], base.eps)
    prefix = "model.layers.%d.self_attn." % LAYER
    raw, _ = safetensors_io.load_file(path)
    W = {k[len(prefix):-len(".weight")]: v.astype(np.float64) for k, v in raw.items() if k.startswith(prefix)}

    os.makedirs(OUT, exist_ok=True)
    x.numpy().astype("<f4").tofile(os.path.join(OUT, "x.f32"))
    variants = []
    for name, rope_scaling in (("", None), ("_yarn", YARN)):
        cfg = dict(base.config, rope_scaling=rope_scaling)
        m = deepseek_ref.DeepseekRef(cfg, safetensors_io.load_checkpoint(MODEL_DIR)) if rope_scaling else base
        with torch.no_grad():
            out = m.attention(LAYER, x)
            # the latent a cache holds: kv_a_layernorm(c_kv) | interleaved-RoPE'd k_rope
            ckv = x @ m.layers[LAYER]["kv_a"].t()
            cos, sin = deepseek_ref.rope_cos_sin(cfg, T)
            latent = torch.cat([deepseek_ref.rms_norm(ckv[:, : m.kv_rank], m.layers[LAYER]["kv_a_norm"], m.eps),
                                deepseek_ref.rope_interleaved(ckv[:, m.kv_rank:], cos, sin)], dim=-1)
        o64, lat64 = hf_style_attention(cfg, W, x.numpy())
        d_out = float(np.abs(out.numpy() - o64).max())
        d_lat = float(np.abs(latent.numpy() - lat64).max())
        print("variant %-6s max|out| %.4f  f32 ref vs f64 HF-style: out %.2e latent %.2e"
              % (name or "plain", float(out.abs().max()), d_out, d_lat))
        if d_out > 1e-5 or d_lat > 1e-5:
            sys.exit("reference and the float64 HF-style MLA disagree")
        out.numpy().astype("<f4").tofile(os.path.join(OUT, "out%s.f32" % name))
        latent.numpy().astype("<f4").tofile(os.path.join(OUT, "latent%s.f32" % name))
        inv, att = deepseek_ref.rope_inv_freq(cfg, cfg["qk_rope_head_dim"])
        variants.append({
            "name": name.strip("_") or "plain",
            "rope_scaling": rope_scaling,
            "out_file": "out%s.f32" % name,
            "latent_file": "latent%s.f32" % name,
            "softmax_scale": deepseek_ref.softmax_scale(cfg),
            "rope_inv_freq": [float(v) for v in inv],
            "rope_attention_factor": att,
            "max_abs_out": float(out.abs().max()),
            "max_abs_latent": float(latent.abs().max()),
            "f32_vs_f64_max_abs_diff": max(d_out, d_lat),
        })
    d = (variants[0]["max_abs_out"], float(np.abs(np.fromfile(os.path.join(OUT, "out.f32"), "<f4")
                                              - np.fromfile(os.path.join(OUT, "out_yarn.f32"), "<f4")).max()))
    print("max |out - out_yarn| = %.4f (YaRN must matter)" % d[1])
    cases = {
        "description": "MLA attention block of layer %d alone: out = o_proj(MLA(x)), positions 0..%d, causal"
                       % (LAYER, T - 1),
        "generator": "tools/reference/make_deepseek_mla_golden.py (deepseek_ref.py, float32; cross-checked "
                     "against a float64 transformers-style implementation)",
        "source_model": MODEL_REL,
        "source_sha256": MODEL_SHA256,
        "layer": LAYER,
        "weights_prefix": prefix,
        "token_ids": ids,
        "n_tokens": T,
        "positions": list(range(T)),
        "hidden_size": base.hidden,
        "num_attention_heads": base.n_heads,
        "q_lora_rank": base.q_rank,
        "kv_lora_rank": base.kv_rank,
        "qk_nope_head_dim": base.nope,
        "qk_rope_head_dim": base.rope,
        "v_head_dim": base.v_dim,
        "rms_norm_eps": base.eps,
        "rope_theta": base.config["rope_theta"],
        "rope_interleave": True,
        "x_file": "x.f32",
        "x": "input_layernorm(layer %d) of the residual stream entering layer %d (reference forward)" % (LAYER, LAYER),
        "x_shape": [T, base.hidden],
        "out_shape": [T, base.hidden],
        "latent": "[kv_a_layernorm(c_kv) (kv_lora_rank) | RoPE'd k_rope (qk_rope_head_dim), pairs (2i, 2i+1)]",
        "latent_shape": [T, base.kv_rank + base.rope],
        "max_abs_out_minus_out_yarn": d[1],
        "suggested_atol": 1e-4,
        "variants": variants,
    }
    with open(os.path.join(OUT, "cases.json"), "w") as f:
        json.dump(cases, f, indent=1)
        f.write("\n")
    print("wrote", OUT, sum(os.path.getsize(os.path.join(OUT, f)) for f in os.listdir(OUT)), "bytes")


if __name__ == "__main__":
    main()
