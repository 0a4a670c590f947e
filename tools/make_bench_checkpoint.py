#!/usr/bin/env python3
"""Write a random-weight Mixtral-shaped benchmark checkpoint in HF format (bf16 safetensors).

Never committed; generate on demand:
    /usr/bin/python3 tools/make_bench_checkpoint.py                # build/models/bench-mixtral-579m
    /usr/bin/python3 tools/make_bench_checkpoint.py --out DIR --layers 1 --hidden 128   # tiny

Default shape: hidden 1024, intermediate 2816, 8 layers, 16 heads, 4 KV heads (head_dim 64),
8 experts, top-2, vocab 2048 (tokenizer files reused from models/tiny-mixtral-shakespeare),
rope_theta 1e6, max_position_embeddings 4096, rms_norm_eps 1e-5.  About 579M parameters,
about 161M active per token.  Weights N(0, 0.02^2) from numpy (seeded), RMSNorm weights 1.0.
Written tensor by tensor (memory stays around one tensor), sharded at --shard-mb (default
500 MB) with model.safetensors.index.json.  Needs only numpy.
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


def tensor_specs(c):
    """(name, shape, is_norm) in HF order (embeddings, layers 0.., norm, lm_head)."""
    H, I, D = c["hidden_size"], c["intermediate_size"], c["head_dim"]
    nh, nkv, E, V = (c["num_attention_heads"], c["num_key_value_heads"],
                     c["num_local_experts"], c["vocab_size"])
    out = [("model.embed_tokens.weight", (V, H), False)]
    for i in range(c["num_hidden_layers"]):
        p = "model.layers.%d." % i
        out += [
            (p + "input_layernorm.weight", (H,), True),
            (p + "self_attn.q_proj.weight", (nh * D, H), False),
            (p + "self_attn.k_proj.weight", (nkv * D, H), False),
            (p + "self_attn.v_proj.weight", (nkv * D, H), False),
            (p + "self_attn.o_proj.weight", (H, nh * D), False),
            (p + "post_attention_layernorm.weight", (H,), True),
            (p + "block_sparse_moe.gate.weight", (E, H), False),
        ]
        for j in range(E):
            q = p + "block_sparse_moe.experts.%d." % j
            out += [(q + "w1.weight", (I, H), False),
                    (q + "w2.weight", (H, I), False),
                    (q + "w3.weight", (I, H), False)]
    out += [("model.norm.weight", (H,), True), ("lm_head.weight", (V, H), False)]
    return out


def param_counts(c):
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


def main():
    ap = argparse.ArgumentParser(description="random-weight Mixtral bench checkpoint (bf16, sharded)")
    ap.add_argument("--out", default=os.path.join(REPO, "build", "models", "bench-mixtral-579m"))
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--intermediate", type=int, default=2816)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--head-dim", type=int, default=0, help="default hidden/heads")
    ap.add_argument("--experts", type=int, default=8)
    ap.add_argument("--top-k", type=int, default=2)
    ap.add_argument("--std", type=float, default=0.02)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--router-skew", type=float, default=1.0,
                    help="scale the router rows of the first quarter of the experts (a skewed "
                         "router: those experts win most tokens); 1 = unskewed")
    ap.add_argument("--shard-mb", type=float, default=500.0,
                    help="max shard size in MB (1e6 bytes); 0 = single model.safetensors")
    a = ap.parse_args()
    if a.hidden % a.heads and not a.head_dim:
        sys.exit("--hidden must be divisible by --heads (or pass --head-dim)")
    if a.heads % a.kv_heads:
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
        nbytes = 2 * int(np.prod(spec[1]))
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
                path, [(nm, "BF16", s) for nm, s, _ in shard], {"format": "pt"}) as w:
            for nm, shape, is_norm in shard:
                if is_norm:
                    arr = np.ones(shape, dtype=np.float32)
                else:
                    arr = rng.standard_normal(shape, dtype=np.float32)
                    arr *= np.float32(a.std)
                    if nm.endswith("block_sparse_moe.gate.weight") and a.router_skew != 1.0:
                        arr[: max(1, shape[0] // 4)] *= np.float32(a.router_skew)
                w.write(nm, arr)
                weight_map[nm] = fn
                data_bytes += 2 * arr.size
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
                   "transformers_version": "4.46.0"}, f, indent=2)
        f.write("\n")
    src = tokenizer_src()
    for fn in TOKENIZER_FILES:
        shutil.copyfile(os.path.join(src, fn), os.path.join(a.out, fn))

    print("wrote %s in %.1fs" % (a.out, time.time() - t0))
    print("parameters: %d total (%.1fM), %d active per token (%.1fM; top-%d of %d experts, "
          "excluding the embedding lookup)" % (total, total / 1e6, active, active / 1e6,
                                               c["num_experts_per_tok"], c["num_local_experts"]))


if __name__ == "__main__":
    main()
