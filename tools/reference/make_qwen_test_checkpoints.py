"""Write the tiny random-weight Qwen2-MoE and Qwen3-MoE checkpoints for tests (deterministic).

Output (one directory per model, single model.safetensors, all tensors BF16):
  tests/data/models/random-qwen2-moe/   model_type qwen2_moe
      3 layers, mlp_only_layers [1] -> layers 0, 2 sparse, layer 1 dense;
      8 experts top-4, norm_topk_prob false, shared expert (48) with sigmoid gate;
      q/k/v biases; hidden 64, 4 heads / 2 kv heads (head_dim 16), rope_theta 10000.
  tests/data/models/random-qwen3-moe/   model_type qwen3_moe
      4 layers, decoder_sparse_step 2 -> layers 1, 3 sparse, layers 0, 2 dense;
      8 experts top-2, norm_topk_prob true, no shared expert, no attention bias;
      hidden 64, 4 heads / 2 kv heads, head_dim 32 (q dim 128 != hidden), q_norm / k_norm,
      rope_theta 1e6.
  plus config.json, generation_config.json and the tokenizer files of tiny-mixtral-shakespeare
  (vocab 2048, bos 1, eos 2).

Weights: torch.Generator seeded per model (--seed + model index), drawn in a fixed order
(the sorted tensor names), float32 then rounded to bf16 (round-to-nearest-even):
  embed_tokens N(0, 1); lm_head N(0, (2/sqrt(H))^2)  -> logits std ~2, healthy greedy margins
  linear weights N(0, 1/fan_in); q/k/v biases N(0, 0.3^2)
  router mlp.gate N(0, (gain/sqrt(H))^2), gain 1 (qwen2) / 2 (qwen3)
                                                      -> routing non-degenerate, not uniform
  shared_expert_gate N(0, (1.5/sqrt(H))^2)            -> sigmoid gate spread over ~0.2-0.8
  RMSNorm weights (layer norms, model.norm, q_norm, k_norm) 1 + N(0, 0.1^2) (q/k_norm 0.2^2)
"""
import argparse
import json
import math
import os
import shutil
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import safetensors_io  # noqa: E402
from make_test_checkpoint import REPO, TOKENIZER_FILES, tiny_model_dir  # noqa: E402

MODELS_DIR = os.path.join(REPO, "tests", "data", "models")

QWEN2_CONFIG = {
    "architectures": ["Qwen2MoeForCausalLM"],
    "model_type": "qwen2_moe",
    "vocab_size": 2048,
    "hidden_size": 64,
    "intermediate_size": 96,
    "num_hidden_layers": 3,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "hidden_act": "silu",
    "max_position_embeddings": 512,
    "initializer_range": 0.02,
    "rms_norm_eps": 1e-06,
    "use_cache": True,
    "tie_word_embeddings": False,
    "rope_theta": 10000.0,
    "rope_scaling": None,
    "use_sliding_window": False,
    "sliding_window": 512,
    "max_window_layers": 3,
    "attention_dropout": 0.0,
    "decoder_sparse_step": 1,
    "moe_intermediate_size": 32,
    "shared_expert_intermediate_size": 48,
    "num_experts_per_tok": 4,
    "num_experts": 8,
    "norm_topk_prob": False,
    "output_router_logits": False,
    "router_aux_loss_coef": 0.001,
    "mlp_only_layers": [1],
    "bos_token_id": 1,
    "eos_token_id": 2,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.46.0",
}

QWEN3_CONFIG = {
    "architectures": ["Qwen3MoeForCausalLM"],
    "model_type": "qwen3_moe",
    "vocab_size": 2048,
    "hidden_size": 64,
    "intermediate_size": 96,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "hidden_act": "silu",
    "max_position_embeddings": 512,
    "initializer_range": 0.02,
    "rms_norm_eps": 1e-06,
    "use_cache": True,
    "tie_word_embeddings": False,
    "rope_theta": 1000000.0,
    "rope_scaling": None,
    "attention_bias": False,
    "use_sliding_window": False,
    "sliding_window": None,
    "max_window_layers": 4,
    "attention_dropout": 0.0,
    "decoder_sparse_step": 2,
    "moe_intermediate_size": 32,
    "num_experts_per_tok": 2,
    "num_experts": 8,
    "norm_topk_prob": True,
    "output_router_logits": False,
    "router_aux_loss_coef": 0.001,
    "mlp_only_layers": [],
    "bos_token_id": 1,
    "eos_token_id": 2,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.51.0",
}

# (directory name, config, seed offset, router gain)
# qwen2 gets a flatter router (gain 1) so that its top-4 of 8 softmax weights sum to clearly
# less than 1 and the un-normalised weighting (norm_topk_prob false) matters.
MODELS = {
    "qwen2": ("random-qwen2-moe", QWEN2_CONFIG, 0, 1.0),
    "qwen3": ("random-qwen3-moe", QWEN3_CONFIG, 1, 2.0),
}


def is_sparse(c, i):
    return (i not in (c.get("mlp_only_layers") or []) and c["num_experts"] > 0
            and (i + 1) % c["decoder_sparse_step"] == 0)


def tensor_specs(c):
    """list of (name, shape, kind); kind picks the init distribution (see module doc)."""
    qwen3 = c["model_type"] == "qwen3_moe"
    H, V = c["hidden_size"], c["vocab_size"]
    nh, nkv = c["num_attention_heads"], c["num_key_value_heads"]
    D = c["head_dim"] if qwen3 else H // nh
    qkv_bias = c.get("attention_bias", False) if qwen3 else True
    o_bias = c.get("attention_bias", False) if qwen3 else False
    out = [("model.embed_tokens.weight", (V, H), "embed"),
           ("model.norm.weight", (H,), "norm")]
    if not c["tie_word_embeddings"]:
        out.append(("lm_head.weight", (V, H), "lm_head"))
    for i in range(c["num_hidden_layers"]):
        p = "model.layers.%d." % i
        out += [(p + "input_layernorm.weight", (H,), "norm"),
                (p + "post_attention_layernorm.weight", (H,), "norm"),
                (p + "self_attn.q_proj.weight", (nh * D, H), "linear"),
                (p + "self_attn.k_proj.weight", (nkv * D, H), "linear"),
                (p + "self_attn.v_proj.weight", (nkv * D, H), "linear"),
                (p + "self_attn.o_proj.weight", (H, nh * D), "linear")]
        if qkv_bias:
            out += [(p + "self_attn.q_proj.bias", (nh * D,), "bias"),
                    (p + "self_attn.k_proj.bias", (nkv * D,), "bias"),
                    (p + "self_attn.v_proj.bias", (nkv * D,), "bias")]
        if o_bias:
            out.append((p + "self_attn.o_proj.bias", (H,), "bias"))
        if qwen3:
            out += [(p + "self_attn.q_norm.weight", (D,), "head_norm"),
                    (p + "self_attn.k_norm.weight", (D,), "head_norm")]

        def mlp(prefix, inter):
            return [(prefix + "gate_proj.weight", (inter, H), "linear"),
                    (prefix + "up_proj.weight", (inter, H), "linear"),
                    (prefix + "down_proj.weight", (H, inter), "linear")]

        if is_sparse(c, i):
            out.append((p + "mlp.gate.weight", (c["num_experts"], H), "router"))
            for j in range(c["num_experts"]):
                out += mlp(p + "mlp.experts.%d." % j, c["moe_intermediate_size"])
            if not qwen3:
                out += mlp(p + "mlp.shared_expert.", c["shared_expert_intermediate_size"])
                out.append((p + "mlp.shared_expert_gate.weight", (1, H), "shared_gate"))
        else:
            out += mlp(p + "mlp.", c["intermediate_size"])
    return sorted(out)


def init(shape, kind, g, H, router_gain):
    t = torch.randn(shape, generator=g, dtype=torch.float32)
    if kind == "embed":
        return t
    if kind == "lm_head":
        return t * (2.0 / math.sqrt(H))
    if kind == "router":
        return t * (router_gain / math.sqrt(H))
    if kind == "linear":
        return t / math.sqrt(shape[1])
    if kind == "bias":
        return t * 0.3
    if kind == "shared_gate":
        return t * (1.5 / math.sqrt(H))
    if kind == "norm":
        return 1.0 + 0.1 * t
    if kind == "head_norm":
        return 1.0 + 0.2 * t
    raise ValueError(kind)


def write_model(key, seed, out_root=MODELS_DIR):
    name, c, off, router_gain = MODELS[key]
    out = os.path.join(out_root, name)
    os.makedirs(out, exist_ok=True)
    g = torch.Generator().manual_seed(seed + off)
    tensors = {n: init(shape, kind, g, c["hidden_size"], router_gain).numpy()
               for n, shape, kind in tensor_specs(c)}
    safetensors_io.save_file(tensors, os.path.join(out, "model.safetensors"), dtype="BF16",
                             metadata={"format": "pt"})
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
    n_params = sum(v.size for v in tensors.values())
    size = sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out))
    print("wrote %s: %d tensors, %d params, %d bytes on disk" % (out, len(tensors), n_params, size))
    return out


def main():
    ap = argparse.ArgumentParser(description="tiny random Qwen2-MoE / Qwen3-MoE checkpoints (BF16)")
    ap.add_argument("--only", choices=sorted(MODELS), default=None)
    ap.add_argument("--seed", type=int, default=20250611)
    ap.add_argument("--out-root", default=MODELS_DIR)
    a = ap.parse_args()
    for key in sorted(MODELS):
        if a.only in (None, key):
            write_model(key, a.seed, a.out_root)


if __name__ == "__main__":
    main()
