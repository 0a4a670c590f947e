#!/usr/bin/env python3
"""Mixtral-shaped Hugging Face checkpoint -> GGUF (llama.cpp's "llama" architecture with
experts), bf16 or q8_0, for the llama.cpp comparison (tools/bench/llama_cpp_compare.sh).

llama.cpp's own convert_hf_to_gguf.py needs the transformers, safetensors and
sentencepiece Python packages, which Debian's python3 here lacks; this converter needs
numpy and llama.cpp's gguf-py (pass the snapshot's gguf-py directory). It writes what
that converter writes for a Mixtral with a SentencePiece tokenizer:
  - q/k projections permuted to llama.cpp's rotary layout (convert_hf_to_gguf's
    LlamaModel.permute), expert matrices stacked per layer (ffn_{gate,up,down}_exps),
    norms and the router (ffn_gate_inp) in f32, the rest in the chosen type;
  - the vocabulary from tokenizer.model (pieces, scores, types: parsed here from the
    SentencePiece protobuf), tokenizer.ggml.model "llama", BOS added, EOS not.

Usage: hf_to_gguf.py MODEL_DIR OUT.gguf --type bf16|q8_0 --gguf-py /work/llama.cpp/gguf-py
"""
import argparse
import json
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reference"))
import safetensors_io  # noqa: E402


def varint(buf, i):
    shift = result = 0
    while True:
        b = buf[i]
        i += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, i
        shift += 7


def sentencepiece_vocab(path):
    """(pieces, scores, types) of a SentencePiece ModelProto (field 1: repeated pieces)."""
    buf = open(path, "rb").read()
    pieces, scores, types = [], [], []
    i = 0
    while i < len(buf):
        key, i = varint(buf, i)
        field, wire = key >> 3, key & 7
        if wire == 2:
            n, i = varint(buf, i)
            body = buf[i:i + n]
            i += n
            if field != 1:
                continue
            piece, score, typ = "", 0.0, 1
            j = 0
            while j < len(body):
                k2, j = varint(body, j)
                f2, w2 = k2 >> 3, k2 & 7
                if w2 == 2:
                    m, j = varint(body, j)
                    if f2 == 1:
                        piece = body[j:j + m].decode("utf-8")
                    j += m
                elif w2 == 5:
                    if f2 == 2:
                        score = struct.unpack("<f", body[j:j + 4])[0]
                    j += 4
                elif w2 == 0:
                    v, j = varint(body, j)
                    if f2 == 3:
                        typ = v
                elif w2 == 1:
                    j += 8
            pieces.append(piece)
            scores.append(score)
            types.append(typ)
        elif wire == 0:
            _, i = varint(buf, i)
        elif wire == 5:
            i += 4
        elif wire == 1:
            i += 8
        else:
            raise ValueError(f"{path}: unsupported protobuf wire type {wire}")
    return pieces, scores, types


def permute(w, n_head):
    """HF q/k rows (rotate_half halves) -> llama.cpp's interleaved rotary pairs."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("out")
    ap.add_argument("--type", choices=["bf16", "q8_0"], default="bf16")
    ap.add_argument("--gguf-py", required=True, help="llama.cpp's gguf-py directory")
    a = ap.parse_args()
    sys.path.insert(0, a.gguf_py)
    import gguf  # noqa: E402

    cfg = json.load(open(os.path.join(a.model, "config.json")))
    if cfg.get("model_type") != "mixtral":
        sys.exit(f"{a.model}: model_type {cfg.get('model_type')!r}; this converter handles mixtral only")
    hidden, heads, kv_heads = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    head_dim = cfg.get("head_dim") or hidden // heads
    n_layers, n_exp = cfg["num_hidden_layers"], cfg["num_local_experts"]
    qtype = gguf.GGMLQuantizationType.BF16 if a.type == "bf16" else gguf.GGMLQuantizationType.Q8_0
    t = safetensors_io.load_checkpoint(a.model)  # name -> float32 array (bf16 widened exactly)

    w = gguf.GGUFWriter(a.out, "llama")
    w.add_name(os.path.basename(os.path.normpath(a.model)))
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(hidden)
    w.add_block_count(n_layers)
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_rope_dimension_count(head_dim)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_rope_freq_base(cfg.get("rope_theta", 10000.0))
    w.add_expert_count(n_exp)
    w.add_expert_used_count(cfg["num_experts_per_tok"])
    w.add_vocab_size(cfg["vocab_size"])
    w.add_file_type(gguf.LlamaFileType.MOSTLY_BF16 if a.type == "bf16" else gguf.LlamaFileType.MOSTLY_Q8_0)
    pieces, scores, types = sentencepiece_vocab(os.path.join(a.model, "tokenizer.model"))
    if len(pieces) != cfg["vocab_size"]:
        sys.exit(f"tokenizer.model has {len(pieces)} pieces, config.json vocab_size {cfg['vocab_size']}")
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(pieces)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(cfg.get("bos_token_id", 1))
    w.add_eos_token_id(cfg.get("eos_token_id", 2))
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)

    def put(name, arr, keep_f32=False):
        arr = np.ascontiguousarray(arr, dtype=np.float32)
        if keep_f32 or arr.ndim == 1:
            w.add_tensor(name, arr)
        else:
            w.add_tensor(name, gguf.quants.quantize(arr, qtype), raw_dtype=qtype)

    put("token_embd.weight", t["model.embed_tokens.weight"])
    put("output_norm.weight", t["model.norm.weight"])
    put("output.weight", t.get("lm_head.weight", t["model.embed_tokens.weight"]))
    for l in range(n_layers):
        p = f"model.layers.{l}."
        put(f"blk.{l}.attn_norm.weight", t[p + "input_layernorm.weight"])
        put(f"blk.{l}.attn_q.weight", permute(t[p + "self_attn.q_proj.weight"], heads))
        put(f"blk.{l}.attn_k.weight", permute(t[p + "self_attn.k_proj.weight"], kv_heads))
        put(f"blk.{l}.attn_v.weight", t[p + "self_attn.v_proj.weight"])
        put(f"blk.{l}.attn_output.weight", t[p + "self_attn.o_proj.weight"])
        put(f"blk.{l}.ffn_norm.weight", t[p + "post_attention_layernorm.weight"])
        put(f"blk.{l}.ffn_gate_inp.weight", t[p + "block_sparse_moe.gate.weight"], keep_f32=True)
        e = p + "block_sparse_moe.experts."
        put(f"blk.{l}.ffn_gate_exps.weight", np.stack([t[f"{e}{j}.w1.weight"] for j in range(n_exp)]))
        put(f"blk.{l}.ffn_down_exps.weight", np.stack([t[f"{e}{j}.w2.weight"] for j in range(n_exp)]))
        put(f"blk.{l}.ffn_up_exps.weight", np.stack([t[f"{e}{j}.w3.weight"] for j in range(n_exp)]))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {a.out} ({a.type}, {os.path.getsize(a.out) / 1e6:.1f} MB)")


if __name__ == "__main__":
    main()
