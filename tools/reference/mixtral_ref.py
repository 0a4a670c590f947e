"""Independent float32 PyTorch reference of Hugging Face MixtralForCausalLM (transformers 4.46).

Whole-sequence forward (no KV cache).  Weights are read with safetensors_io (BF16/F16/F32,
sharded or not) and upcast to float32; all compute is float32.

Math (per HF modeling_mixtral.py, 4.46):
  h = embed_tokens[ids]
  per layer:
    a = RMSNorm(h; input_layernorm)            x * rsqrt(mean(x^2) + eps) * w
    q,k,v = a Wq^T, a Wk^T, a Wv^T              (no bias), heads / kv heads of head_dim
    q,k = RoPE rotate_half(q,k)                 inv_freq = 1/theta^(arange(0,d,2)/d),
                                                emb = cat(freqs, freqs)
    k,v repeated num_heads/num_kv_heads times   (GQA)
    o = softmax(q k^T / sqrt(d) + causal) v  -> Wo
    h = h + o
    m = RMSNorm(h; post_attention_layernorm)
    router = softmax(m Wg^T) over all experts (f32); top-k; renormalise to sum 1
    h = h + sum_k w_k * W2_e (silu(W1_e m) * W3_e m)
  logits = RMSNorm(h; model.norm) lm_head^T   (lm_head = embed_tokens if tied)

Usage:
  m = load_model("models/tiny-mixtral-shakespeare")
  logits = m.forward([1, 2, 3])        # torch.FloatTensor [T, vocab]
  ids = m.greedy([1, 2, 3], 32)        # list of new ids (stops early at EOS; m.last_stopped_at_eos)
"""
import json
import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io  # noqa: E402

torch.set_num_threads(2)


def rms_norm(x, weight, eps):
    x = x.float()
    var = x.pow(2).mean(-1, keepdim=True)
    return weight * (x * torch.rsqrt(var + eps))


def rotate_half(x):
    d = x.shape[-1]
    return torch.cat((-x[..., d // 2:], x[..., : d // 2]), dim=-1)


def rope_cos_sin(positions, head_dim, theta):
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    freqs = positions.float()[:, None] * inv_freq[None, :]  # [T, d/2]
    emb = torch.cat((freqs, freqs), dim=-1)  # [T, d]
    return emb.cos(), emb.sin()


class MixtralRef:
    def __init__(self, config, tensors):
        c = config
        self.config = c
        self.hidden = c["hidden_size"]
        self.n_layers = c["num_hidden_layers"]
        self.n_heads = c["num_attention_heads"]
        self.n_kv = c.get("num_key_value_heads") or self.n_heads
        self.head_dim = c.get("head_dim") or self.hidden // self.n_heads
        self.n_experts = c["num_local_experts"]
        self.top_k = c["num_experts_per_tok"]
        self.eps = float(c["rms_norm_eps"])
        self.theta = float(c.get("rope_theta", 1e6))
        self.vocab = c["vocab_size"]
        eos = c.get("eos_token_id")
        self.eos_ids = set(eos if isinstance(eos, list) else ([] if eos is None else [eos]))
        if c.get("sliding_window") not in (None, 0):
            print("warning: sliding_window=%r ignored (fine for sequences shorter than it)"
                  % c["sliding_window"], file=sys.stderr)

        T = {k: torch.from_numpy(np.array(v, dtype=np.float32)) for k, v in tensors.items()}
        self.embed = T["model.embed_tokens.weight"]
        if c.get("tie_word_embeddings", False):
            self.lm_head = self.embed
        else:
            self.lm_head = T["lm_head.weight"]
        self.norm = T["model.norm.weight"]
        self.layers = []
        for i in range(self.n_layers):
            p = "model.layers.%d." % i
            L = {
                "in_norm": T[p + "input_layernorm.weight"],
                "post_norm": T[p + "post_attention_layernorm.weight"],
                "q": T[p + "self_attn.q_proj.weight"],
                "k": T[p + "self_attn.k_proj.weight"],
                "v": T[p + "self_attn.v_proj.weight"],
                "o": T[p + "self_attn.o_proj.weight"],
                "gate": T[p + "block_sparse_moe.gate.weight"],
                "experts": [
                    tuple(T[p + "block_sparse_moe.experts.%d.%s.weight" % (j, w)]
                          for w in ("w1", "w2", "w3"))
                    for j in range(self.n_experts)
                ],
            }
            self.layers.append(L)
        self._check_shapes()
        self.last_topk = None  # per layer: LongTensor [T, k] of the last forward
        self.last_stopped_at_eos = False

    def _check_shapes(self):
        H, D, I = self.hidden, self.head_dim, self.config["intermediate_size"]
        assert tuple(self.embed.shape) == (self.vocab, H), self.embed.shape
        assert tuple(self.lm_head.shape) == (self.vocab, H), self.lm_head.shape
        for L in self.layers:
            assert tuple(L["q"].shape) == (self.n_heads * D, H)
            assert tuple(L["k"].shape) == (self.n_kv * D, H)
            assert tuple(L["v"].shape) == (self.n_kv * D, H)
            assert tuple(L["o"].shape) == (H, self.n_heads * D)
            assert tuple(L["gate"].shape) == (self.n_experts, H)
            for w1, w2, w3 in L["experts"]:
                assert tuple(w1.shape) == (I, H) and tuple(w3.shape) == (I, H)
                assert tuple(w2.shape) == (H, I)

    # ------------------------------------------------------------------ blocks
    def attention(self, L, x, cos, sin):
        Tn = x.shape[0]
        D = self.head_dim
        q = (x @ L["q"].t()).view(Tn, self.n_heads, D).transpose(0, 1)  # [h, T, D]
        k = (x @ L["k"].t()).view(Tn, self.n_kv, D).transpose(0, 1)
        v = (x @ L["v"].t()).view(Tn, self.n_kv, D).transpose(0, 1)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        rep = self.n_heads // self.n_kv
        k = k.repeat_interleave(rep, dim=0)  # HF repeat_kv: kv head j serves heads j*rep..
        v = v.repeat_interleave(rep, dim=0)
        scores = (q @ k.transpose(1, 2)) / math.sqrt(D)
        mask = torch.full((Tn, Tn), float("-inf")).triu(1)
        scores = scores + mask
        probs = torch.softmax(scores.float(), dim=-1)
        out = (probs @ v).transpose(0, 1).reshape(Tn, self.n_heads * D)
        return out @ L["o"].t()

    def moe(self, L, x):
        router_logits = x @ L["gate"].t()  # [T, E]
        weights = torch.softmax(router_logits.float(), dim=1)
        topw, topi = torch.topk(weights, self.top_k, dim=-1)
        topw = topw / topw.sum(dim=-1, keepdim=True)
        out = torch.zeros_like(x)
        for j, (w1, w2, w3) in enumerate(L["experts"]):
            tok, slot = torch.where(topi == j)
            if tok.numel() == 0:
                continue
            xs = x[tok]
            y = (torch.nn.functional.silu(xs @ w1.t()) * (xs @ w3.t())) @ w2.t()
            y = y * topw[tok, slot, None]
            out.index_add_(0, tok, y)
        return out, topi

    def forward(self, token_ids):
        """token_ids: list/sequence of ints -> float32 logits [T, vocab]."""
        ids = torch.as_tensor(list(token_ids), dtype=torch.long)
        with torch.no_grad():
            h = self.embed[ids]
            cos, sin = rope_cos_sin(torch.arange(ids.numel()), self.head_dim, self.theta)
            topks = []
            for L in self.layers:
                a = rms_norm(h, L["in_norm"], self.eps)
                h = h + self.attention(L, a, cos, sin)
                m = rms_norm(h, L["post_norm"], self.eps)
                y, topi = self.moe(L, m)
                topks.append(topi)
                h = h + y
            h = rms_norm(h, self.norm, self.eps)
            logits = h @ self.lm_head.t()
        self.last_topk = topks
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


# Module-level convenience API (forward/greedy) operates on the most recently loaded model.
_current = None


def load_model(model_dir):
    """Load config.json + safetensors (sharded or not) from model_dir -> MixtralRef."""
    global _current
    with open(os.path.join(model_dir, "config.json")) as f:
        config = json.load(f)
    tensors = safetensors_io.load_checkpoint(model_dir)
    _current = MixtralRef(config, tensors)
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
    print("greedy:", mdl.greedy(ids, a.n), "eos" if mdl.last_stopped_at_eos else "")
