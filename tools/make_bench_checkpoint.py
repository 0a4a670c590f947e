#!/usr/bin/env python3
"""Write a random-weight benchmark checkpoint in HF format (bf16 safetensors): Mixtral-shaped
(the default) or, with --family deepseek_v3, DeepSeek-V3-shaped (multi-head latent attention).

Never committed; generate on demand:
    /usr/bin/python3 tools/make_bench_checkpoint.py                # build/models/bench-mixtral-579m
    /usr/bin/python3 tools/make_bench_checkpoint.py --out DIR --layers 1 --hidden 128   # tiny
    /usr/bin/python3 tools/make_bench_checkpoint.py --family deepseek_v3 --out /work/models/bench-deepseek-v3-500m

Default shape: hidden 1024, intermediate 2816, 8 layers, 16 heads, 4 KV heads (head_dim 64),
8 experts, top-2, vocab 2048 (tokenizer files reused from models/tiny-mixtral-shakespeare),
rope_theta 1e6, max_position_embeddings 4096, rms_norm_eps 1e-5.  About 579M parameters,
about 161M active per token.  Weights N(0, 0.02^2) from numpy (seeded), RMSNorm weights 1.0.
Written tensor by tensor (memory stays around one tensor), sharded at --shard-mb (default
500 MB) with model.safetensors.index.json.  Needs only numpy.

--family deepseek_v3 (tensor names and config fields of transformers' modeling_deepseek_v3.py):
hidden 1024, 10 layers (layer 0 a dense SwiGLU MLP of intermediate 2816: first_k_dense_replace 1),
16 heads, q_lora_rank 384, kv_lora_rank 256, qk_nope_head_dim 64, qk_rope_head_dim 32,
v_head_dim 64, 32 routed experts of moe_intermediate_size 512, top-4, n_group 4, topk_group 2
(sigmoid / noaux_tc router, F32 e_score_correction_bias N(0, 0.01^2)), 1 shared expert,
routed_scaling_factor 2.5, vocab 2048, rope_theta 10000 (interleaved), rope_scaling null,
max_position_embeddings 4096, rms_norm_eps 1e-6.  508.8M parameters, 110.4M active per token.
"""
import argparse
import json
import os
import shutil
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "reference"))
import safetensors_io  # noqa: E402

TOKENIZER_FILES = ("tokenizer.model", "tokenizer_config.json", "special_tokens_map.json")


def tokenizer_src():
    for d in (os.path.join(REPO, "models", "tiny-mixtral-shakespeare"),
              "/work/shared/models/tiny-mixtral-shakespeare"):
        if all(os.path.exists(os.path.join(d, f)) for f in TOKENIZER_FILES):
            return d
    raise FileNotFoundError("tokenizer files of tiny-mixtral-shakespeare not found")


def make_config(a):
    if a.family == "deepseek_v3":
        return make_deepseek_config(a)
    head_dim = a.head_dim or a.hidden // a.heads
    return {
        "architectures": ["MixtralForCausalLM"],
        "model_type": "mixtral",
        "vocab_size": 2048,
        "hidden_size": a.hidden,
        "intermediate_size": a.intermediate,
        "num_hidden_layers": a.layers,
        "num_attention_heads": a.heads,
        "num_key_value_heads": a.kv_heads,
        "head_dim": head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": 4096,
        "initializer_range": 0.02,
        "rms_norm_eps": 1e-05,
        "use_cache": True,
        "pad_token_id": None,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "tie_word_embeddings": False,
        "rope_theta": 1000000.0,
        "sliding_window": None,
        "attention_dropout": 0.0,
        "num_experts_per_tok": a.top_k,
        "num_local_experts": a.experts,
        "output_router_logits": False,
        "router_aux_loss_coef": 0.02,
        "router_jitter_noise": 0.0,
        "torch_dtype": "bfloat16",
        "transformers_version": "4.46.0",
    }


def make_deepseek_config(a):
    return {
        "architectures": ["DeepseekV3ForCausalLM"],
        "model_type": "deepseek_v3",
        "vocab_size": 2048,
        "hidden_size": a.hidden,
        "intermediate_size": a.intermediate,
        "moe_intermediate_size": a.moe_intermediate,
        "num_hidden_layers": a.layers,
        "num_attention_heads": a.heads,
        "num_key_value_heads": a.heads,
        "n_shared_experts": a.shared_experts,
        "n_routed_experts": a.experts,
        "routed_scaling_factor": 2.5,
        "kv_lora_rank": a.kv_lora_rank,
        "q_lora_rank": a.q_lora_rank,
        "qk_rope_head_dim": a.qk_rope_head_dim,
        "v_head_dim": a.v_head_dim,
        "qk_nope_head_dim": a.qk_nope_head_dim,
        "n_group": a.n_group,
        "topk_group": a.topk_group,
        "num_experts_per_tok": a.top_k,
        "first_k_dense_replace": a.first_k_dense_replace,
        "moe_layer_freq": 1,
        "norm_topk_prob": True,
        "scoring_func": "sigmoid",
        "topk_method": "noaux_tc",
        "hidden_act": "silu",
        "max_position_embeddings": 4096,
        "initializer_range": 0.02,
        "rms_norm_eps": 1e-06,
        "use_cache": True,
        "pad_token_id": None,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "pretraining_tp": 1,
        "tie_word_embeddings": False,
        "rope_theta": 10000.0,
        "rope_scaling": None,
        "rope_interleave": True,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "num_nextn_predict_layers": 0,
        "ep_size": 1,
        "torch_dtype": "bfloat16",
        "transformers_version": "4.57.1",
    }


def tensor_specs(c):
    """(name, shape, kind) in HF order (embeddings, layers 0.., norm, lm_head); kind is
    "w" (random bf16), "norm" (ones, bf16) or "bias" (random F32 router bias)."""
    if c["model_type"] == "deepseek_v3":
        return deepseek_tensor_specs(c)
    H, I, D = c["hidden_size"], c["intermediate_size"], c["head_dim"]
    nh, nkv, E, V = (c["num_attention_heads"], c["num_key_value_heads"],
                     c["num_local_experts"], c["vocab_size"])
    out = [("model.embed_tokens.weight", (V, H), "w")]
    for i in range(c["num_hidden_layers"]):
        p = "model.layers.%d." % i
        out += [
            (p + "input_layernorm.weight", (H,), "norm"),
            (p + "self_attn.q_proj.weight", (nh * D, H), "w"),
            (p + "self_attn.k_proj.weight", (nkv * D, H), "w"),
            (p + "self_attn.v_proj.weight", (nkv * D, H), "w"),
            (p + "self_attn.o_proj.weight", (H, nh * D), "w"),
            (p + "post_attention_layernorm.weight", (H,), "norm"),
            (p + "block_sparse_moe.gate.weight", (E, H), "w"),
        ]
        for j in range(E):
            q = p + "block_sparse_moe.experts.%d." % j
            out += [(q + "w1.weight", (I, H), "w"),
                    (q + "w2.weight", (H, I), "w"),
                    (q + "w3.weight", (I, H), "w")]
    out += [("model.norm.weight", (H,), "norm"), ("lm_head.weight", (V, H), "w")]
    return out


def swiglu_specs(prefix, H, I):
    return [(prefix + "gate_proj.weight", (I, H), "w"),
            (prefix + "up_proj.weight", (I, H), "w"),
            (prefix + "down_proj.weight", (H, I), "w")]


def deepseek_attention_specs(p, c):
    H, nh = c["hidden_size"], c["num_attention_heads"]
    ql, kvl = c["q_lora_rank"], c["kv_lora_rank"]
    nope, rope, vd = c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"]
    a = p + "self_attn."
    return [
        (a + "q_a_proj.weight", (ql, H), "w"),
        (a + "q_a_layernorm.weight", (ql,), "norm"),
        (a + "q_b_proj.weight", (nh * (nope + rope), ql), "w"),
        (a + "kv_a_proj_with_mqa.weight", (kvl + rope, H), "w"),
        (a + "kv_a_layernorm.weight", (kvl,), "norm"),
        (a + "kv_b_proj.weight", (nh * (nope + vd), kvl), "w"),
        (a + "o_proj.weight", (H, nh * vd), "w"),
    ]


def deepseek_tensor_specs(c):
    H, V, E = c["hidden_size"], c["vocab_size"], c["n_routed_experts"]
    out = [("model.embed_tokens.weight", (V, H), "w")]
    for i in range(c["num_hidden_layers"]):
        p = "model.layers.%d." % i
        out += [(p + "input_layernorm.weight", (H,), "norm")]
        out += deepseek_attention_specs(p, c)
        out += [(p + "post_attention_layernorm.weight", (H,), "norm")]
        if i < c["first_k_dense_replace"]:
            out += swiglu_specs(p + "mlp.", H, c["intermediate_size"])
            continue
        MI = c["moe_intermediate_size"]
        out += [(p + "mlp.gate.weight", (E, H), "w"),
                (p + "mlp.gate.e_score_correction_bias", (E,), "bias")]
        for j in range(E):
            out += swiglu_specs(p + "mlp.experts.%d." % j, H, MI)
        if c["n_shared_experts"]:
            out += swiglu_specs(p + "mlp.shared_experts.", H, MI * c["n_shared_experts"])
    out += [("model.norm.weight", (H,), "norm"), ("lm_head.weight", (V, H), "w")]
    return out


def param_counts(c):
    if c["model_type"] == "deepseek_v3":
        return deepseek_param_counts(c)
    H, I, D = c["hidden_size"], c["intermediate_size"], c["head_dim"]
    nh, nkv, E, k, V, L = (c["num_attention_heads"], c["num_key_value_heads"],
                           c["num_local_experts"], c["num_experts_per_tok"],
                           c["vocab_size"], c["num_hidden_layers"])
    attn = H * nh * D * 2 + H * nkv * D * 2
    expert = 3 * H * I
    per_layer_common = attn + E * H + 2 * H
    total = L * (per_layer_common + E * expert) + 2 * V * H + H
    # active per token: all non-expert layer weights, k experts, final norm, lm_head
    # (the embedding row lookup is not counted, as usual)
    active = L * (per_layer_common + k * expert) + H + V * H
    return total, active


def deepseek_param_counts(c):
    """Counted from the formulas (checked against the tensor list in main)."""
    H, V, L = c["hidden_size"], c["vocab_size"], c["num_hidden_layers"]
    nh, ql, kvl = c["num_attention_heads"], c["q_lora_rank"], c["kv_lora_rank"]
    nope, rope, vd = c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"]
    E, k, S, MI = (c["n_routed_experts"], c["num_experts_per_tok"], c["n_shared_experts"],
                   c["moe_intermediate_size"])
    dense = min(c["first_k_dense_replace"], L)
    attn = (H * ql + ql + ql * nh * (nope + rope) + H * (kvl + rope) + kvl
            + kvl * nh * (nope + vd) + nh * vd * H)
    common = attn + 2 * H  # + the two layer norms
    dense_mlp = 3 * H * c["intermediate_size"]
    expert = 3 * H * MI
    router = E * H + E
    total = (dense * (common + dense_mlp) + (L - dense) * (common + router + (E + S) * expert)
             + 2 * V * H + H)
    active = (dense * (common + dense_mlp) + (L - dense) * (common + router + (k + S) * expert)
              + H + V * H)
    return total, active


def main():
    ap = argparse.ArgumentParser(description="random-weight Mixtral or DeepSeek-V3 bench checkpoint (bf16, sharded)")
    ap.add_argument("--family", choices=("mixtral", "deepseek_v3"), default="mixtral")
    ap.add_argument("--out", help="default build/models/bench-mixtral-579m or build/models/bench-deepseek-v3-500m")
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--intermediate", type=int, default=2816,
                    help="expert intermediate (mixtral) or the dense first layers' (deepseek_v3)")
    ap.add_argument("--layers", type=int, help="default 8 (mixtral), 10 (deepseek_v3)")
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--kv-heads", type=int, default=4, help="mixtral only")
    ap.add_argument("--head-dim", type=int, default=0, help="mixtral only; default hidden/heads")
    ap.add_argument("--experts", type=int, help="routed experts; default 8 (mixtral), 32 (deepseek_v3)")
    ap.add_argument("--top-k", type=int, help="default 2 (mixtral), 4 (deepseek_v3)")
    ds = ap.add_argument_group("deepseek_v3 only")
    ds.add_argument("--moe-intermediate", type=int, default=512)
    ds.add_argument("--shared-experts", type=int, default=1)
    ds.add_argument("--first-k-dense-replace", type=int, default=1)
    ds.add_argument("--n-group", type=int, default=4)
    ds.add_argument("--topk-group", type=int, default=2)
    ds.add_argument("--q-lora-rank", type=int, default=384)
    ds.add_argument("--kv-lora-rank", type=int, default=256)
    ds.add_argument("--qk-nope-head-dim", type=int, default=64)
    ds.add_argument("--qk-rope-head-dim", type=int, default=32)
    ds.add_argument("--v-head-dim", type=int, default=64)
    ap.add_argument("--std", type=float, default=0.02)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--router-skew", type=float, default=1.0,
                    help="scale the router rows of the first quarter of the experts (a skewed "
                         "router: those experts win most tokens); 1 = unskewed")
    ap.add_argument("--shard-mb", type=float, default=500.0,
                    help="max shard size in MB (1e6 bytes); 0 = single model.safetensors")
    a = ap.parse_args()
    ds_family = a.family == "deepseek_v3"
    if a.out is None:
        a.out = os.path.join(REPO, "build", "models",
                             "bench-deepseek-v3-500m" if ds_family else "bench-mixtral-579m")
    if a.layers is None:
        a.layers = 10 if ds_family else 8
    if a.experts is None:
        a.experts = 32 if ds_family else 8
    if a.top_k is None:
        a.top_k = 4 if ds_family else 2
    if ds_family:
        if a.experts % a.n_group:
            sys.exit("--experts must be divisible by --n-group")
        if not 1 <= a.topk_group <= a.n_group:
            sys.exit("--topk-group must be in [1, --n-group]")
        if a.top_k > a.topk_group * (a.experts // a.n_group):
            sys.exit("--top-k is more than the experts of --topk-group groups")
        if a.qk_rope_head_dim % 2:
            sys.exit("--qk-rope-head-dim must be even")
    elif a.hidden % a.heads and not a.head_dim:
        sys.exit("--hidden must be divisible by --heads (or pass --head-dim)")
    elif a.heads % a.kv_heads:
        sys.exit("--heads must be divisible by --kv-heads")

    t0 = time.time()
    c = make_config(a)
    specs = tensor_specs(c)
    total, active = param_counts(c)
    assert total == sum(int(np.prod(s)) for _, s, _ in specs)
    os.makedirs(a.out, exist_ok=True)
    for fn in os.listdir(a.out):  # drop stale shards / index from an earlier run
        if fn.endswith(".safetensors") or fn == "model.safetensors.index.json":
            os.remove(os.path.join(a.out, fn))

    # assign tensors to shards in HF order
    limit = int(a.shard_mb * 1e6) if a.shard_mb > 0 else None
    shards, cur, cur_bytes = [], [], 0
    for spec in specs:
        nbytes = (4 if spec[2] == "bias" else 2) * int(np.prod(spec[1]))
        if limit is not None and cur and cur_bytes + nbytes > limit:
            shards.append(cur)
            cur, cur_bytes = [], 0
        cur.append(spec)
        cur_bytes += nbytes
    shards.append(cur)
    n = len(shards)
    if n == 1:
        files = ["model.safetensors"]
    else:
        files = ["model-%05d-of-%05d.safetensors" % (i + 1, n) for i in range(n)]

    rng = np.random.default_rng(a.seed)
    weight_map = {}
    data_bytes = 0
    for fn, shard in zip(files, shards):
        path = os.path.join(a.out, fn)
        with safetensors_io.StreamingWriter(
                path, [(nm, "F32" if kind == "bias" else "BF16", s) for nm, s, kind in shard],
                {"format": "pt"}) as w:
            for nm, shape, kind in shard:
                if kind == "norm":
                    arr = np.ones(shape, dtype=np.float32)
                else:
                    arr = rng.standard_normal(shape, dtype=np.float32)
                    arr *= np.float32(0.01 if kind == "bias" else a.std)
                    if (nm.endswith("block_sparse_moe.gate.weight") or nm.endswith("mlp.gate.weight")) \
                            and a.router_skew != 1.0:
                        arr[: max(1, shape[0] // 4)] *= np.float32(a.router_skew)
                w.write(nm, arr)
                weight_map[nm] = fn
                data_bytes += (4 if kind == "bias" else 2) * arr.size
                del arr
        print("  %s  %d tensors  %.1f MB  (%.1fs)" % (fn, len(shard), os.path.getsize(path) / 1e6,
                                                      time.time() - t0), flush=True)
    if n > 1:
        safetensors_io.write_index(a.out, weight_map, data_bytes)

    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(c, f, indent=2)
        f.write("\n")
    with open(os.path.join(a.out, "generation_config.json"), "w") as f:
        json.dump({"_from_model_config": True, "bos_token_id": 1, "eos_token_id": 2,
                   "transformers_version": c["transformers_version"]}, f, indent=2)
        f.write("\n")
    src = tokenizer_src()
    for fn in TOKENIZER_FILES:
        shutil.copyfile(os.path.join(src, fn), os.path.join(a.out, fn))

    print("wrote %s in %.1fs" % (a.out, time.time() - t0))
    experts = c.get("num_local_experts") or c["n_routed_experts"]
    shared = " + %d shared" % c["n_shared_experts"] if c.get("n_shared_experts") else ""
    print("parameters: %d total (%.1fM), %d active per token (%.1fM; top-%d of %d experts%s, "
          "excluding the embedding lookup)" % (total, total / 1e6, active, active / 1e6,
                                               c["num_experts_per_tok"], experts, shared))


if __name__ == "__main__":
    main()
