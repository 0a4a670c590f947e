"""Write a tiny random-weight Mixtral checkpoint for loader tests (deterministic).

Output (default tests/data/models/random-mixtral-sharded/):
  config.json, generation_config.json, tokenizer.model, tokenizer_config.json,
  special_tokens_map.json (copied from the tiny Shakespeare model),
  model-00001-of-00002.safetensors  (all tensors F16)
  model-00002-of-00002.safetensors  (all tensors F32)
  model.safetensors.index.json
Layer 1 is split across the two shards (attention + norms in shard 1, MoE in shard 2),
so a loader must really follow the index per tensor.

Shapes: hidden 64, intermediate 96, 2 layers, 4 heads, 2 KV heads, head_dim 16,
4 experts, top-2, vocab 2048, rope_theta 500000, rms_norm_eps 1e-6.
Weights: torch.Generator seeded with --seed (default 20241129), N(0, 0.05^2);
RMSNorm weights 1 + N(0, 0.05^2).
"""
import argparse
import json
import os
import shutil
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import safetensors_io  # noqa: E402

REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
DEFAULT_OUT = os.path.join(REPO, "tests", "data", "models", "random-mixtral-sharded")
TOKENIZER_FILES = ("tokenizer.model", "tokenizer_config.json", "special_tokens_map.json")


def tiny_model_dir():
    """The shipped tiny model: repo copy if present, else the shared original."""
    for d in (os.path.join(REPO, "models", "tiny-mixtral-shakespeare"),
              "/work/shared/models/tiny-mixtral-shakespeare"):
        if os.path.exists(os.path.join(d, "config.json")):
            return d
    raise FileNotFoundError("tiny-mixtral-shakespeare not found (models/ or /work/shared/models/)")


CONFIG = {
    "architectures": ["MixtralForCausalLM"],
    "model_type": "mixtral",
    "vocab_size": 2048,
    "hidden_size": 64,
    "intermediate_size": 96,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "hidden_act": "silu",
    "max_position_embeddings": 256,
    "initializer_range": 0.05,
    "rms_norm_eps": 1e-06,
    "use_cache": True,
    "pad_token_id": None,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "tie_word_embeddings": False,
    "rope_theta": 500000.0,
    "sliding_window": None,
    "attention_dropout": 0.0,
    "num_experts_per_tok": 2,
    "num_local_experts": 4,
    "output_router_logits": False,
    "router_aux_loss_coef": 0.01,
    "router_jitter_noise": 0.0,
    "torch_dtype": "float16",
    "transformers_version": "4.46.0",
}


def tensor_specs(c):
    """Ordered list of (name, shape, is_norm) in HF order."""
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


def shard_of(name, c):
    """Shard 1 (F16): embeddings, layer 0, layer 1 attention+norms. Shard 2 (F32): the rest."""
    last = c["num_hidden_layers"] - 1
    if name == "model.embed_tokens.weight":
        return 1
    if name.startswith("model.layers."):
        i = int(name.split(".")[2])
        if i < last:
            return 1
        return 2 if ".block_sparse_moe." in name else 1
    return 2


def main():
    ap = argparse.ArgumentParser(description="tiny random Mixtral checkpoint (2 shards, F16+F32)")
    ap.add_argument("--out", default=DEFAULT_OUT)
    ap.add_argument("--seed", type=int, default=20241129)
    a = ap.parse_args()
    c = CONFIG
    os.makedirs(a.out, exist_ok=True)

    g = torch.Generator().manual_seed(a.seed)
    tensors = {}
    for name, shape, is_norm in tensor_specs(c):
        t = torch.randn(shape, generator=g, dtype=torch.float32) * 0.05
        if is_norm:
            t = t + 1.0
        tensors[name] = t.numpy()

    names = {1: "model-00001-of-00002.safetensors", 2: "model-00002-of-00002.safetensors"}
    dtypes = {1: "F16", 2: "F32"}
    weight_map = {}
    total = 0
    for s in (1, 2):
        part = {n: v for n, v in tensors.items() if shard_of(n, c) == s}
        safetensors_io.save_file(part, os.path.join(a.out, names[s]), dtype=dtypes[s],
                                 metadata={"format": "pt"})
        for n, v in part.items():
            weight_map[n] = names[s]
            total += v.size * (2 if dtypes[s] == "F16" else 4)
    safetensors_io.write_index(a.out, weight_map, total)

    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(c, f, indent=2)
        f.write("\n")
    with open(os.path.join(a.out, "generation_config.json"), "w") as f:
        json.dump({"_from_model_config": True, "bos_token_id": 1, "eos_token_id": 2,
                   "transformers_version": "4.46.0"}, f, indent=2)
        f.write("\n")
    src = tiny_model_dir()
    for fn in TOKENIZER_FILES:
        shutil.copyfile(os.path.join(src, fn), os.path.join(a.out, fn))

    n_params = sum(v.size for v in tensors.values())
    size = sum(os.path.getsize(os.path.join(a.out, f)) for f in os.listdir(a.out))
    print("wrote %s: %d tensors, %d params, %d bytes on disk" % (a.out, len(tensors), n_params, size))


if __name__ == "__main__":
    main()
