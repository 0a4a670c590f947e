"""Independent float32 PyTorch reference of HF Qwen2MoeForCausalLM and Qwen3MoeForCausalLM.

Re-implements the eager math of transformers' modeling_qwen2_moe.py / modeling_qwen3_moe.py
(checked against the huggingface/transformers sources: modeling_qwen2_moe.py at commit
00a3f938 and modeling_qwen3_moe.py at 00d4b3d2, both transformers 4.5x, and the config
defaults of configuration_qwen2_moe.py / configuration_qwen3_moe.py at 008e5743; the eager
math is the same in every release that has the models: Qwen2-MoE since 4.40, Qwen3-MoE
since 4.51).
Whole-sequence forward (no KV cache). Weights are read with safetensors_io (BF16/F16/F32,
sharded or not) and upcast to float32; all compute is float32.

  h = embed_tokens[ids]
  per layer i:
    a = RMSNorm(h; input_layernorm)                 x * rsqrt(mean(x^2) + eps) * w
    q = a Wq^T (+ bq), k = a Wk^T (+ bk), v = a Wv^T (+ bv)  [heads / kv heads of head_dim]
        qwen2_moe: q/k/v biases present (config qkv_bias, default true), o_proj none;
                   head_dim = hidden / heads
        qwen3_moe: biases (q, k, v AND o) only if config attention_bias (default false);
                   head_dim from config; then per head q = RMSNorm(q; self_attn.q_norm),
                   k = RMSNorm(k; self_attn.k_norm) over head_dim, eps = rms_norm_eps,
                   BEFORE RoPE
    q,k = RoPE NeoX rotate_half, inv_freq = 1/theta^(arange(0,d,2)/d), emb = cat(freqs, freqs)
    GQA: kv head j serves query heads j*rep .. j*rep+rep-1
    o = softmax(q k^T / sqrt(head_dim) + causal) v  -> Wo
    h = h + o
    m = RMSNorm(h; post_attention_layernorm)
    layer i is sparse iff i not in mlp_only_layers and num_experts > 0
                          and (i + 1) % decoder_sparse_step == 0
    dense:  y = down(silu(gate m) * up m)                    width intermediate_size
    sparse: p = softmax(m Wg^T) over all experts (f32); top-k (num_experts_per_tok) of p;
            if norm_topk_prob: p_k /= sum(p_k)  (config value; HF default false for both)
            y = sum_k p_k * down_e(silu(gate_e m) * up_e m)  width moe_intermediate_size
            qwen2_moe only: y += sigmoid(m . shared_expert_gate) *
                                 shared_expert.down(silu(shared_expert.gate m) * shared_expert.up m)
                            width shared_expert_intermediate_size
    h = h + y
  logits = RMSNorm(h; model.norm) lm_head^T      (lm_head = embed_tokens if tie_word_embeddings)

Not implemented (refused or warned): rope_scaling, sliding-window attention
(use_sliding_window must be false; HF then ignores sliding_window).

Usage:
  m = load_model("tests/data/models/random-qwen3-moe")
  logits = m.forward([1, 2, 3])     # torch.FloatTensor [T, vocab]
  m.last_topk / m.last_topw         # {layer: [T, k]} router choice / weights of the last forward
  ids = m.greedy([1, 2, 3], 32)     # new ids (stops early at EOS; m.last_stopped_at_eos)
  m.ablate = {"shared_gate"}        # for sanity checks only, see ABLATIONS
"""
import json
import math
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import safetensors_io  # noqa: E402
from mixtral_ref import rms_norm, rope_cos_sin, rotate_half  # noqa: E402  (generic Llama-family math)

torch.set_num_threads(2)

FAMILIES = ("qwen2_moe", "qwen3_moe")

# Deliberately wrong variants, used only to prove each feature influences the logits:
#   shared_gate    qwen2: shared expert added with gate 1 instead of sigmoid(shared_expert_gate m)
#   shared_expert  qwen2: shared expert dropped altogether
#   dense          dense (non-sparse) layers' MLP skipped
#   norm_topk      norm_topk_prob inverted
#   qk_norm        qwen3: q_norm / k_norm skipped
#   qkv_bias       q/k/v biases dropped
ABLATIONS = ("shared_gate", "shared_expert", "dense", "norm_topk", "qk_norm", "qkv_bias")


def swiglu(x, gate, up, down):
    return (torch.nn.functional.silu(x @ gate.t()) * (x @ up.t())) @ down.t()


class QwenMoeRef:
    def __init__(self, config, tensors):
        c = config
        self.config = c
        self.family = c["model_type"]
        if self.family not in FAMILIES:
            raise ValueError("model_type %r is not one of %s" % (self.family, FAMILIES))
        self.qwen3 = self.family == "qwen3_moe"
        self.hidden = c["hidden_size"]
        self.n_layers = c["num_hidden_layers"]
        self.n_heads = c["num_attention_heads"]
        self.n_kv = c.get("num_key_value_heads") or self.n_heads
        if self.qwen3:
            self.head_dim = c.get("head_dim") or self.hidden // self.n_heads
        else:
            self.head_dim = self.hidden // self.n_heads
            if c.get("head_dim") not in (None, self.head_dim):
                raise ValueError("qwen2_moe needs head_dim == hidden_size / num_attention_heads")
        self.n_experts = c.get("num_experts", 0)
        self.top_k = c["num_experts_per_tok"]
        self.norm_topk_prob = bool(c.get("norm_topk_prob", False))
        self.eps = float(c["rms_norm_eps"])
        rp = c.get("rope_parameters") or {}
        self.theta = float(c.get("rope_theta", rp.get("rope_theta", 10000.0)))
        if c.get("rope_scaling") or rp.get("rope_type", "default") != "default":
            raise ValueError("rope scaling is not implemented in this reference")
        if c.get("use_sliding_window", False):
            raise ValueError("use_sliding_window=true is not implemented in this reference")
        self.vocab = c["vocab_size"]
        mlp_only = set(c.get("mlp_only_layers") or [])
        step = c.get("decoder_sparse_step", 1)
        self.sparse = [i not in mlp_only and self.n_experts > 0 and (i + 1) % step == 0
                       for i in range(self.n_layers)]
        self.moe_layers = [i for i in range(self.n_layers) if self.sparse[i]]
        eos = c.get("eos_token_id")
        self.eos_ids = set(eos if isinstance(eos, list) else ([] if eos is None else [eos]))

        T = {k: torch.from_numpy(np.array(v, dtype=np.float32)) for k, v in tensors.items()}
        used = set()

        def get(name, optional=False):
            if name not in T:
                if optional:
                    return None
                raise KeyError("missing tensor %s" % name)
            used.add(name)
            return T[name]

        if self.qwen3:
            has_qkv_bias = has_o_bias = bool(c.get("attention_bias", False))
        else:
            has_qkv_bias, has_o_bias = bool(c.get("qkv_bias", True)), False
        self.embed = get("model.embed_tokens.weight")
        self.lm_head = self.embed if c.get("tie_word_embeddings", False) else get("lm_head.weight")
        self.norm = get("model.norm.weight")
        self.layers = []
        for i in range(self.n_layers):
            p = "model.layers.%d." % i
            L = {
                "in_norm": get(p + "input_layernorm.weight"),
                "post_norm": get(p + "post_attention_layernorm.weight"),
            }
            for w in "qkvo":
                L[w] = get(p + "self_attn.%s_proj.weight" % w)
                has = has_o_bias if w == "o" else has_qkv_bias
                L[w + "_bias"] = get(p + "self_attn.%s_proj.bias" % w) if has else None
            if self.qwen3:
                L["q_norm"] = get(p + "self_attn.q_norm.weight")
                L["k_norm"] = get(p + "self_attn.k_norm.weight")
            if self.sparse[i]:
                L["gate"] = get(p + "mlp.gate.weight")
                L["experts"] = [tuple(get(p + "mlp.experts.%d.%s_proj.weight" % (j, w))
                                      for w in ("gate", "up", "down"))
                                for j in range(self.n_experts)]
                if not self.qwen3:
                    L["shared"] = tuple(get(p + "mlp.shared_expert.%s_proj.weight" % w)
                                        for w in ("gate", "up", "down"))
                    L["shared_gate"] = get(p + "mlp.shared_expert_gate.weight")
            else:
                L["mlp"] = tuple(get(p + "mlp.%s_proj.weight" % w) for w in ("gate", "up", "down"))
            self.layers.append(L)
        unused = sorted(set(T) - used)
        if unused:
            raise ValueError("checkpoint has tensors this architecture does not use: %s" % unused[:5])
        self._check_shapes()
        self.ablate = set()
        self.last_topk = None  # {layer: LongTensor [T, k]} of the last forward (sparse layers only)
        self.last_topw = None  # {layer: FloatTensor [T, k]} routing weights used
        self.last_stopped_at_eos = False

    def _check_shapes(self):
        c = self.config
        H, D = self.hidden, self.head_dim
        assert tuple(self.embed.shape) == (self.vocab, H), self.embed.shape
        assert tuple(self.lm_head.shape) == (self.vocab, H), self.lm_head.shape
        for i, L in enumerate(self.layers):
            assert tuple(L["q"].shape) == (self.n_heads * D, H), (i, L["q"].shape)
            assert tuple(L["k"].shape) == (self.n_kv * D, H)
            assert tuple(L["v"].shape) == (self.n_kv * D, H)
            assert tuple(L["o"].shape) == (H, self.n_heads * D)
            for w in "qkvo":
                if L[w + "_bias"] is not None:
                    assert tuple(L[w + "_bias"].shape) == (L[w].shape[0],)
            if self.qwen3:
                assert tuple(L["q_norm"].shape) == (D,) and tuple(L["k_norm"].shape) == (D,)
            if self.sparse[i]:
                I = c["moe_intermediate_size"]
                assert tuple(L["gate"].shape) == (self.n_experts, H)
                for g, u, d in L["experts"]:
                    assert tuple(g.shape) == (I, H) and tuple(u.shape) == (I, H)
                    assert tuple(d.shape) == (H, I)
                if not self.qwen3:
                    S = c["shared_expert_intermediate_size"]
                    g, u, d = L["shared"]
                    assert tuple(g.shape) == (S, H) and tuple(u.shape) == (S, H)
                    assert tuple(d.shape) == (H, S)
                    assert tuple(L["shared_gate"].shape) == (1, H)
            else:
                I = c["intermediate_size"]
                g, u, d = L["mlp"]
                assert tuple(g.shape) == (I, H) and tuple(u.shape) == (I, H)
                assert tuple(d.shape) == (H, I)

    # ------------------------------------------------------------------ blocks
    def attention(self, L, x, cos, sin):
        Tn = x.shape[0]
        D = self.head_dim

        def proj(w):
            y = x @ L[w].t()
            if L[w + "_bias"] is not None and "qkv_bias" not in self.ablate:
                y = y + L[w + "_bias"]
            return y

        q = proj("q").view(Tn, self.n_heads, D)
        k = proj("k").view(Tn, self.n_kv, D)
        v = proj("v").view(Tn, self.n_kv, D)
        if self.qwen3 and "qk_norm" not in self.ablate:
            q = rms_norm(q, L["q_norm"], self.eps)  # over head_dim, each head separately
            k = rms_norm(k, L["k_norm"], self.eps)
        q, k, v = (t.transpose(0, 1) for t in (q, k, v))  # [heads, T, D]
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        rep = self.n_heads // self.n_kv
        k = k.repeat_interleave(rep, dim=0)
        v = v.repeat_interleave(rep, dim=0)
        scores = (q @ k.transpose(1, 2)) / math.sqrt(D)
        scores = scores + torch.full((Tn, Tn), float("-inf")).triu(1)
        probs = torch.softmax(scores.float(), dim=-1)
        out = (probs @ v).transpose(0, 1).reshape(Tn, self.n_heads * D)
        out = out @ L["o"].t()
        if L["o_bias"] is not None:
            out = out + L["o_bias"]
        return out

    def moe(self, L, x):
        probs = torch.softmax((x @ L["gate"].t()).float(), dim=-1)  # [T, E]
        topw, topi = torch.topk(probs, self.top_k, dim=-1)
        if self.norm_topk_prob != ("norm_topk" in self.ablate):
            topw = topw / topw.sum(dim=-1, keepdim=True)
        out = torch.zeros_like(x)
        for j, (g, u, d) in enumerate(L["experts"]):
            tok, slot = torch.where(topi == j)
            if tok.numel() == 0:
                continue
            y = swiglu(x[tok], g, u, d) * topw[tok, slot, None]
            out.index_add_(0, tok, y)
        if not self.qwen3 and "shared_expert" not in self.ablate:
            s = swiglu(x, *L["shared"])
            if "shared_gate" not in self.ablate:
                s = torch.sigmoid(x @ L["shared_gate"].t()) * s  # [T, 1] * [T, H]
            out = out + s
        return out, topi, topw

    def forward(self, token_ids):
        """token_ids: list/sequence of ints -> float32 logits [T, vocab]."""
        ids = torch.as_tensor(list(token_ids), dtype=torch.long)
        topk, topw = {}, {}
        with torch.no_grad():
            h = self.embed[ids]
            cos, sin = rope_cos_sin(torch.arange(ids.numel()), self.head_dim, self.theta)
            for i, L in enumerate(self.layers):
                a = rms_norm(h, L["in_norm"], self.eps)
                h = h + self.attention(L, a, cos, sin)
                m = rms_norm(h, L["post_norm"], self.eps)
                if self.sparse[i]:
                    y, topk[i], topw[i] = self.moe(L, m)
                elif "dense" in self.ablate:
                    y = torch.zeros_like(m)
                else:
                    y = swiglu(m, *L["mlp"])
                h = h + y
            h = rms_norm(h, self.norm, self.eps)
            logits = h @ self.lm_head.t()
        self.last_topk, self.last_topw = topk, topw
        return logits

    def greedy(self, token_ids, n):
        """Greedy decode n new tokens (full recompute per step). Stops early on EOS (included)."""
        seq = list(token_ids)
        new = []
        self.last_stopped_at_eos = False
        for _ in range(n):
            nxt = int(torch.argmax(self.forward(seq)[-1]).item())
            new.append(nxt)
            seq.append(nxt)
            if nxt in self.eos_ids:
                self.last_stopped_at_eos = True
                break
        return new


_current = None


def load_model(model_dir):
    """Load config.json + safetensors (sharded or not) from model_dir -> QwenMoeRef."""
    global _current
    with open(os.path.join(model_dir, "config.json")) as f:
        config = json.load(f)
    _current = QwenMoeRef(config, safetensors_io.load_checkpoint(model_dir))
    return _current


def forward(token_ids, model=None):
    return (model or _current).forward(token_ids)


def greedy(token_ids, n, model=None):
    return (model or _current).greedy(token_ids, n)


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model_dir")
    ap.add_argument("--ids", default="1", help="comma-separated prompt token ids")
    ap.add_argument("-n", type=int, default=16)
    a = ap.parse_args()
    mdl = load_model(a.model_dir)
    ids = [int(t) for t in a.ids.split(",")]
    print("moe layers:", mdl.moe_layers)
    print("greedy:", mdl.greedy(ids, a.n), "eos" if mdl.last_stopped_at_eos else "")
