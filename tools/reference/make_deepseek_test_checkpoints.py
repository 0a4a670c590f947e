"""Write the small random-weight DeepSeek-family checkpoints for tests (deterministic).

Output (one directory per model under tests/data/models/, single model.safetensors):
  random-deepseek-v2-lite     deepseek_v2, V2-Lite shaped: q_lora_rank null (q_proj), softmax,
                              greedy top-3 of 8, norm_topk_prob false, routed_scaling_factor 1.0,
                              2 shared experts, layer 0 dense, YaRN with V2-Lite's keys
                              (factor 40, mscale = mscale_all_dim = 0.707)
  random-deepseek-v2-grouped  deepseek_v2, q_lora_rank 48, group_limited_greedy (4 groups of 2,
                              2 kept), top-3, norm_topk_prob false, routed_scaling_factor 1.5,
                              moe_layer_freq 2 with first_k_dense_replace 0 (layers 0, 2 MoE;
                              1, 3 dense), "linear" rope_scaling factor 2
  random-kimi-k2              kimi_k2 (DeepseekV3ForCausalLM), noaux_tc sigmoid, n_group 1,
                              random F32 e_score_correction_bias, top-4 of 16, norm_topk_prob
                              true, routed_scaling_factor 2.827, YaRN (factor 32, beta 1/1,
                              mscale 1/1), rope_theta 50000
  random-deepseek-v3-fp8      deepseek_v3, noaux_tc (4 groups of 4, 2 kept), top-4 of 16,
                              V3's YaRN (factor 40), FP8 e4m3 weights with 32x32 block
                              `weight_scale_inv` (partial edge blocks: 24, 40, 48-wide matrices)
plus config.json, generation_config.json, README.md and the tokenizer files of
tiny-mixtral-shakespeare (vocab 2048, bos 1, eos 2).

Shared sizes: hidden 64, 4 heads, kv_lora_rank 32, qk_nope_head_dim 16, qk_rope_head_dim 8,
v_head_dim 24 (v != nope on purpose), dense intermediate 96.

Weights: torch.Generator seeded per model (--seed + model index), drawn in sorted tensor-name
order, float32, then stored as BF16 (round-to-nearest-even), or for the FP8 model's Linear
weights quantised DeepSeek-style: per 32x32 block, scale_inv = max|w| / 448 (1 if the block is
all zero), fp8 = e4m3(w / scale_inv) rounded to nearest even.
  embed_tokens N(0, 1); lm_head N(0, 4/H); Linear weights N(0, 1/fan_in);
  router mlp.gate N(0, (2/sqrt(H))^2); e_score_correction_bias N(0, 0.15^2) (F32);
  RMSNorm weights (input/post_attention, q_a/kv_a_layernorm, model.norm) 1 + N(0, 0.1^2).
Also (with the FP8 model) tests/data/golden/deepseek-v3-fp8-dequant/: three tensors' dequantised
float32 values decoded from the written file by safetensors_io + deepseek_ref.dequant_fp8 (raw
little-endian f32, row-major) and cases.json (names, shapes, block, scale shapes, files).

FP8 model: Linear weights of self_attn (q_a_proj, q_b_proj, kv_a_proj_with_mqa, kv_b_proj,
o_proj), the dense MLP, every routed expert and the shared experts are F8_E4M3 + F32
`<name>_scale_inv`; embed_tokens, lm_head, norms and mlp.gate stay BF16, the bias F32.
"""
import argparse
import json
import math
import os
import shutil
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import safetensors_io  # noqa: E402
from make_test_checkpoint import REPO, TOKENIZER_FILES, tiny_model_dir  # noqa: E402

MODELS_DIR = os.path.join(REPO, "tests", "data", "models")
DEQUANT_GOLDEN = os.path.join(REPO, "tests", "data", "golden", "deepseek-v3-fp8-dequant")
# one attention, one routed-expert and one shared-expert weight, each with partial edge blocks
DEQUANT_TENSORS = ("model.layers.1.self_attn.kv_a_proj_with_mqa.weight",   # [40, 64]: rows 32 + 8
                   "model.layers.1.mlp.experts.5.down_proj.weight",         # [64, 24]: cols 24 of 32
                   "model.layers.2.mlp.shared_experts.up_proj.weight")      # [24, 64]: rows 24 of 32
SCRIPT = "tools/reference/make_deepseek_test_checkpoints.py"
DEFAULT_SEED = 20261202

_COMMON = {
    "vocab_size": 2048,
    "hidden_size": 64,
    "intermediate_size": 96,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "kv_lora_rank": 32,
    "qk_nope_head_dim": 16,
    "qk_rope_head_dim": 8,
    "v_head_dim": 24,
    "hidden_act": "silu",
    "initializer_range": 0.02,
    "rms_norm_eps": 1e-06,
    "use_cache": True,
    "pad_token_id": None,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "tie_word_embeddings": False,
    "attention_bias": False,
    "attention_dropout": 0.0,
    "ep_size": 1,
    "torch_dtype": "bfloat16",
}


def _cfg(**kw):
    c = dict(_COMMON)
    c.update(kw)
    return dict(sorted(c.items()))


V2_LITE = _cfg(
    architectures=["DeepseekV2ForCausalLM"], model_type="deepseek_v2",
    num_hidden_layers=3, q_lora_rank=None, moe_intermediate_size=24,
    n_routed_experts=8, num_experts_per_tok=3, n_shared_experts=2,
    first_k_dense_replace=1, moe_layer_freq=1, n_group=1, topk_group=1,
    scoring_func="softmax", topk_method="greedy", norm_topk_prob=False, routed_scaling_factor=1.0,
    rope_theta=10000.0, max_position_embeddings=163840,
    rope_scaling={"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 0.707,
                  "mscale_all_dim": 0.707, "original_max_position_embeddings": 4096, "type": "yarn"},
    aux_loss_alpha=0.001, seq_aux=True, transformers_version="4.57.1")

V2_GROUPED = _cfg(
    architectures=["DeepseekV2ForCausalLM"], model_type="deepseek_v2",
    num_hidden_layers=4, q_lora_rank=48, moe_intermediate_size=24,
    n_routed_experts=8, num_experts_per_tok=3, n_shared_experts=1,
    first_k_dense_replace=0, moe_layer_freq=2, n_group=4, topk_group=2,
    scoring_func="softmax", topk_method="group_limited_greedy", norm_topk_prob=False,
    routed_scaling_factor=1.5, rope_theta=10000.0, max_position_embeddings=1024,
    rope_scaling={"factor": 2.0, "type": "linear"},
    aux_loss_alpha=0.001, seq_aux=True, transformers_version="4.57.1")

KIMI_K2 = _cfg(
    architectures=["DeepseekV3ForCausalLM"], model_type="kimi_k2",
    num_hidden_layers=3, q_lora_rank=48, moe_intermediate_size=16,
    n_routed_experts=16, num_experts_per_tok=4, n_shared_experts=1,
    first_k_dense_replace=1, moe_layer_freq=1, n_group=1, topk_group=1,
    scoring_func="sigmoid", topk_method="noaux_tc", norm_topk_prob=True,
    routed_scaling_factor=2.827, rope_theta=50000.0, max_position_embeddings=131072,
    rope_scaling={"beta_fast": 1.0, "beta_slow": 1.0, "factor": 32.0, "mscale": 1.0,
                  "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096, "type": "yarn"},
    rope_interleave=True, num_nextn_predict_layers=0, aux_loss_alpha=0.001, seq_aux=True,
    transformers_version="4.57.1")

V3_FP8 = _cfg(
    architectures=["DeepseekV3ForCausalLM"], model_type="deepseek_v3",
    num_hidden_layers=3, q_lora_rank=48, moe_intermediate_size=24,
    n_routed_experts=16, num_experts_per_tok=4, n_shared_experts=1,
    first_k_dense_replace=1, moe_layer_freq=1, n_group=4, topk_group=2,
    scoring_func="sigmoid", topk_method="noaux_tc", norm_topk_prob=True,
    routed_scaling_factor=2.5, rope_theta=10000.0, max_position_embeddings=163840,
    rope_scaling={"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0,
                  "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096, "type": "yarn"},
    rope_interleave=True, num_nextn_predict_layers=0,
    quantization_config={"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                         "weight_block_size": [32, 32]},
    transformers_version="4.57.1")

# key -> (directory, config, seed offset, one-line description)
MODELS = {
    "v2-lite": ("random-deepseek-v2-lite", V2_LITE, 0,
                "DeepSeek-V2-Lite shaped (direct q_proj, softmax greedy router, 2 shared experts, YaRN mscale 0.707)"),
    "v2-grouped": ("random-deepseek-v2-grouped", V2_GROUPED, 1,
                   "DeepSeek-V2 shaped with group_limited_greedy routing, alternating dense/MoE layers, linear RoPE scaling"),
    "kimi-k2": ("random-kimi-k2", KIMI_K2, 2,
                "Kimi-K2 shaped (kimi_k2: noaux_tc sigmoid, n_group 1, routed_scaling_factor 2.827, YaRN beta 1/1)"),
    "v3-fp8": ("random-deepseek-v3-fp8", V3_FP8, 3,
               "DeepSeek-V3 shaped with FP8 e4m3 weights and 32x32 block scales (partial edge blocks)"),
}


def is_sparse(c, i):
    return (c.get("n_routed_experts") or 0) > 0 and i >= c["first_k_dense_replace"] and i % c["moe_layer_freq"] == 0


def tensor_specs(c):
    """sorted list of (name, shape, kind, quantisable)."""
    H, V, nh = c["hidden_size"], c["vocab_size"], c["num_attention_heads"]
    qk = c["qk_nope_head_dim"] + c["qk_rope_head_dim"]
    out = [("model.embed_tokens.weight", (V, H), "embed", False),
           ("model.norm.weight", (H,), "norm", False),
           ("lm_head.weight", (V, H), "lm_head", False)]
    for i in range(c["num_hidden_layers"]):
        p = "model.layers.%d." % i
        a = p + "self_attn."
        out += [(p + "input_layernorm.weight", (H,), "norm", False),
                (p + "post_attention_layernorm.weight", (H,), "norm", False),
                (a + "kv_a_proj_with_mqa.weight", (c["kv_lora_rank"] + c["qk_rope_head_dim"], H), "linear", True),
                (a + "kv_a_layernorm.weight", (c["kv_lora_rank"],), "norm", False),
                (a + "kv_b_proj.weight", (nh * (c["qk_nope_head_dim"] + c["v_head_dim"]), c["kv_lora_rank"]),
                 "linear", True),
                (a + "o_proj.weight", (H, nh * c["v_head_dim"]), "linear", True)]
        if c["q_lora_rank"]:
            r = c["q_lora_rank"]
            out += [(a + "q_a_proj.weight", (r, H), "linear", True),
                    (a + "q_a_layernorm.weight", (r,), "norm", False),
                    (a + "q_b_proj.weight", (nh * qk, r), "linear", True)]
        else:
            out.append((a + "q_proj.weight", (nh * qk, H), "linear", True))

        def mlp(prefix, inter):
            return [(prefix + "gate_proj.weight", (inter, H), "linear", True),
                    (prefix + "up_proj.weight", (inter, H), "linear", True),
                    (prefix + "down_proj.weight", (H, inter), "linear", True)]

        if is_sparse(c, i):
            E, I = c["n_routed_experts"], c["moe_intermediate_size"]
            out.append((p + "mlp.gate.weight", (E, H), "router", False))
            if c["topk_method"] == "noaux_tc":
                out.append((p + "mlp.gate.e_score_correction_bias", (E,), "score_bias", False))
            for j in range(E):
                out += mlp(p + "mlp.experts.%d." % j, I)
            if c.get("n_shared_experts"):
                out += mlp(p + "mlp.shared_experts.", c["n_shared_experts"] * I)
        else:
            out += mlp(p + "mlp.", c["intermediate_size"])
    return sorted(out)


def init(shape, kind, g, H):
    t = torch.randn(shape, generator=g, dtype=torch.float32)
    if kind == "embed":
        return t
    if kind == "lm_head":
        return t * (2.0 / math.sqrt(H))
    if kind == "router":
        return t * (2.0 / math.sqrt(H))
    if kind == "score_bias":
        return t * 0.15
    if kind == "linear":
        return t / math.sqrt(shape[1])
    if kind == "norm":
        return 1.0 + 0.1 * t
    raise ValueError(kind)


def quantize_fp8(w, block):
    """f32 [rows, cols] -> (uint8 e4m3 bits [rows, cols], f32 scale_inv [ceil(rows/br), ceil(cols/bc)])."""
    br, bc = block
    rows, cols = w.shape
    nr, nc = -(-rows // br), -(-cols // bc)
    scale = np.ones((nr, nc), dtype=np.float32)
    bits = np.zeros((rows, cols), dtype=np.uint8)
    for r in range(nr):
        for k in range(nc):
            blk = w[r * br:(r + 1) * br, k * bc:(k + 1) * bc].astype(np.float32)
            amax = float(np.abs(blk).max())
            s = np.float32(amax / safetensors_io.E4M3_MAX) if amax > 0 else np.float32(1.0)
            scale[r, k] = s
            bits[r * br:(r + 1) * br, k * bc:(k + 1) * bc] = safetensors_io.f32_to_e4m3_bits(blk / s)
    return bits, scale


def write_readme(out, key, c, n_params, files):
    name, _, off, desc = MODELS[key]
    lines = [
        "# %s" % name, "",
        "Random weights, for tests only (no training; the text it writes is noise). %s." % desc, "",
        "Made by `/usr/bin/python3 %s --only %s` (seed %d + %d, torch.Generator, deterministic:"
        % (SCRIPT, key, DEFAULT_SEED, off),
        "rerunning gives byte-identical files). See that script's docstring for the init scales and",
        "tools/reference/README.md for the golden data (tests/data/golden/%s/) made from it" % name,
        "with tools/reference/deepseek_ref.py.", "",
        "Tokenizer files: copied from models/tiny-mixtral-shakespeare (vocab 2048, BOS 1, EOS 2).", "",
        "| field | value |", "| --- | --- |",
    ]
    for k in ("model_type", "num_hidden_layers", "hidden_size", "num_attention_heads", "q_lora_rank",
              "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "intermediate_size",
              "moe_intermediate_size", "n_routed_experts", "num_experts_per_tok", "n_shared_experts",
              "first_k_dense_replace", "moe_layer_freq", "scoring_func", "topk_method", "n_group", "topk_group",
              "norm_topk_prob", "routed_scaling_factor", "rope_theta", "rope_scaling", "max_position_embeddings",
              "quantization_config"):
        if k in c:
            lines.append("| %s | `%s` |" % (k, json.dumps(c[k])))
    moe = [i for i in range(c["num_hidden_layers"]) if is_sparse(c, i)]
    lines += ["", "MoE layers: %s; the others are dense SwiGLU MLPs of width %d." % (moe, c["intermediate_size"]),
              "Parameters: %d (FP8 weights counted once; scale tensors not counted)." % n_params, ""]
    if c.get("quantization_config"):
        lines += ["FP8: every Linear weight of attention, the dense MLP, the routed experts and the shared",
                  "experts is `F8_E4M3` with an F32 `<name>_scale_inv` of shape [ceil(rows/32), ceil(cols/32)];",
                  "dequantised weight = fp8 value * scale_inv of its 32x32 block. embed_tokens, lm_head, the",
                  "norms and mlp.gate.weight are BF16, e_score_correction_bias F32.", ""]
    lines.append("Files: " + ", ".join("`%s` (%d B)" % (f, s) for f, s in files) + ".")
    with open(os.path.join(out, "README.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


def write_model(key, seed=DEFAULT_SEED, out_root=MODELS_DIR):
    name, c, off, _ = MODELS[key]
    out = os.path.join(out_root, name)
    os.makedirs(out, exist_ok=True)
    g = torch.Generator().manual_seed(seed + off)
    q = c.get("quantization_config")
    tensors, dtypes, n_params, originals = {}, {}, 0, {}
    for n, shape, kind, quantisable in tensor_specs(c):
        w = init(shape, kind, g, c["hidden_size"]).numpy()
        n_params += w.size
        originals[n] = w
        if q and quantisable:
            bits, scale = quantize_fp8(w, tuple(q["weight_block_size"]))
            tensors[n], dtypes[n] = bits, "F8_E4M3"
            tensors[n + "_scale_inv"], dtypes[n + "_scale_inv"] = scale, "F32"
        else:
            tensors[n], dtypes[n] = w, ("F32" if kind == "score_bias" else "BF16")
    safetensors_io.save_file(tensors, os.path.join(out, "model.safetensors"), dtype=dtypes,
                             metadata={"format": "pt"})
    if q:
        write_dequant_golden(out, {n: originals[n] for n in DEQUANT_TENSORS})
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(c, f, indent=2)
        f.write("\n")
    with open(os.path.join(out, "generation_config.json"), "w") as f:
        json.dump({"_from_model_config": True, "bos_token_id": 1, "eos_token_id": 2,
                   "transformers_version": c["transformers_version"]}, f, indent=2)
        f.write("\n")
    src = tiny_model_dir()
    for fn in TOKENIZER_FILES:
        shutil.copyfile(os.path.join(src, fn), os.path.join(out, fn))
    files = [(f, os.path.getsize(os.path.join(out, f))) for f in
             ("config.json", "generation_config.json", "model.safetensors") + TOKENIZER_FILES]
    write_readme(out, key, c, n_params, files)
    size = sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out))
    print("wrote %s: %d tensors, %d params, %d bytes on disk" % (out, len(tensors), n_params, size))
    return out


def write_dequant_golden(model_dir, originals, out=DEQUANT_GOLDEN):
    """Dequantise DEQUANT_TENSORS from the written checkpoint with the reference's own decoder."""
    import deepseek_ref  # noqa: E402  (only needed here)
    with open(os.path.join(model_dir, "config.json")) as f:
        block = tuple(json.load(f)["quantization_config"]["weight_block_size"])
    path = os.path.join(model_dir, "model.safetensors")
    header, _ = safetensors_io.read_header(path)
    names = set(DEQUANT_TENSORS) | {n + "_scale_inv" for n in DEQUANT_TENSORS}
    got, _ = safetensors_io.load_file(path, names=names)
    os.makedirs(out, exist_ok=True)
    cases = {"description": "FP8 e4m3 weights dequantised: w[r][c] = fp8(bits[r][c]) * scale_inv[r // %d][c // %d]"
                            % block,
             "generator": SCRIPT + " (safetensors_io F8_E4M3 decoder + deepseek_ref.dequant_fp8, float32)",
             "source_model": "tests/data/models/" + MODELS["v3-fp8"][0],
             "weight_block_size": list(block), "dtype": "float32 little-endian, row-major", "tensors": []}
    for n in DEQUANT_TENSORS:
        w = deepseek_ref.dequant_fp8(got[n], got[n + "_scale_inv"], block)
        # the quantiser rounds to nearest: each value is within half an e4m3 step of the original
        err = np.abs(w - originals[n]) / np.repeat(np.repeat(got[n + "_scale_inv"], block[0], 0), block[1], 1)[
            : w.shape[0], : w.shape[1]]
        assert float(err.max()) <= 16.0 + 1e-3, (n, float(err.max()))  # 448 range: step <= 32, half 16
        fn = n.replace("model.layers.", "layer").replace(".", "_").replace("_weight", "") + ".f32"
        w.astype("<f4").tofile(os.path.join(out, fn))
        cases["tensors"].append({
            "name": n, "shape": list(w.shape), "file": fn,
            "stored_dtype": header[n]["dtype"], "scale_name": n + "_scale_inv",
            "scale_shape": list(got[n + "_scale_inv"].shape),
            "max_abs": float(np.abs(w).max()),
            "max_abs_diff_from_unquantised_f32": float(np.abs(w - originals[n]).max()),
        })
    with open(os.path.join(out, "cases.json"), "w") as f:
        json.dump(cases, f, indent=1)
        f.write("\n")
    print("wrote %s (%d bytes)" % (out, sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out))))


def main():
    ap = argparse.ArgumentParser(description="small random DeepSeek-V2/V3/Kimi-K2 checkpoints")
    ap.add_argument("--only", choices=sorted(MODELS), default=None)
    ap.add_argument("--seed", type=int, default=DEFAULT_SEED)
    ap.add_argument("--out-root", default=MODELS_DIR)
    a = ap.parse_args()
    for key in MODELS:
        if a.only in (None, key):
            write_model(key, a.seed, a.out_root)


if __name__ == "__main__":
    main()
