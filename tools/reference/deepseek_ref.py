"""Independent float32 PyTorch reference of DeepseekV3ForCausalLM / DeepseekV2ForCausalLM.

Covers model_type deepseek_v3, deepseek_v2 and kimi_k2 (Kimi-K2 is the DeepSeek-V3
architecture). Written from the DeepSeek-V2 / V3 papers, DeepSeek's own modeling_deepseek.py
(V2 and V3, the trust_remote_code files shipped with the checkpoints) and transformers'
modeling_deepseek_v3.py / modeling_deepseek_v2.py. Whole-sequence forward, no KV cache.
Weights are read with safetensors_io (BF16/F16/F32/F8_E4M3, sharded or not); FP8 weights
are dequantised with their block scales; all compute is float32 (RoPE tables in float64,
rounded once to float32).

  h = embed_tokens[ids]
  per layer l:
    a = RMSNorm(h; input_layernorm)                 w * x * rsqrt(mean(x^2) + eps)
    MLA (H heads; nope = qk_nope_head_dim, r = qk_rope_head_dim, dv = v_head_dim):
      q = q_b_proj(RMSNorm(q_a_proj a; q_a_layernorm))   if q_lora_rank, else q_proj a
          -> per head [q_nope (nope) | q_rope (r)]
      [c_kv (kv_lora_rank) | k_rope (r)] = kv_a_proj_with_mqa a;  k_rope: one head, shared
      kv_b_proj(RMSNorm(c_kv; kv_a_layernorm)) -> per head [k_nope (nope) | v (dv)]
      RoPE on q_rope and k_rope only, INTERLEAVED pairs (x[2i], x[2i+1]) rotated by
      pos * inv_freq[i] (rope_interleave true; the complex-number form of DeepSeek's code)
      score = [q_nope|q_rope] . [k_nope|k_rope] * softmax_scale, causal, softmax (f32)
      softmax_scale = (nope + r)^-0.5, times get_mscale(factor, mscale_all_dim)^2 when
      rope_scaling is yarn and mscale_all_dim != 0
      o = o_proj(concat_heads(softmax . v))
    h = h + o;  m = RMSNorm(h; post_attention_layernorm)
    layer l is MoE iff n_routed_experts and l >= first_k_dense_replace and l % moe_layer_freq == 0
    dense: y = down(silu(gate m) * up m), width intermediate_size
    MoE:   s = softmax or sigmoid(m W_gate^T) (f32)   (scoring_func)
           topk_method greedy:               idx = top-k of s
                       group_limited_greedy: group score = max s in the group; keep the
                                             topk_group best groups; idx = top-k of s there
                       noaux_tc:             b = s + e_score_correction_bias (selection
                                             only); group score = sum of the 2 best b in
                                             the group; dropped groups -inf; idx = top-k of b
           w = s[idx] (unbiased); weight rule (see WEIGHT_RULES):
             deepseek_v3 / kimi_k2: if top_k > 1 and norm_topk_prob: w /= sum(w) + 1e-20;
                                    then w *= routed_scaling_factor (always)
             deepseek_v2:           if top_k > 1 and norm_topk_prob: w /= sum(w) + 1e-20
                                    else: w *= routed_scaling_factor   (DeepSeek's V2 code)
           y = sum_j w_j expert_{idx_j}(m) + shared_experts(m)   (shared: one SwiGLU of
               width n_shared_experts * moe_intermediate_size, no gate; absent if 0/None)
    h = h + y
  logits = RMSNorm(h; model.norm) lm_head^T

RoPE: inv_freq[i] = base^(-2i/r), base = rope_theta.
  rope_scaling "linear": inv_freq / factor.
  rope_scaling "yarn" (DeepSeek's DeepseekV3YarnRotaryEmbedding = transformers'
    _compute_yarn_parameters; `factor` taken from rope_scaling as written):
      freq_extra = inv_freq, freq_inter = inv_freq / factor
      dim_at(n) = r * ln(original_max_position_embeddings / (n * 2 pi)) / (2 ln base)
      low = max(floor(dim_at(beta_fast)), 0), high = min(ceil(dim_at(beta_slow)), r - 1)
      ramp[i] = clamp((i - low) / (high - low), 0, 1), i < r/2 (high += 0.001 if equal)
      inv_freq = freq_inter * ramp + freq_extra * (1 - ramp)
      cos, sin *= attention_factor = get_mscale(factor, mscale) / get_mscale(factor,
                  mscale_all_dim) if both mscale and mscale_all_dim are non-zero, else
                  get_mscale(factor)
      get_mscale(s, m=1) = 1 if s <= 1 else 0.1 * m * ln(s) + 1

FP8 (quantization_config quant_method fp8): a weight stored as F8_E4M3 [rows, cols] with
`<name>_scale_inv` F32 [ceil(rows/br), ceil(cols/bc)] ((br, bc) = weight_block_size) is
fp8 value * scale_inv[row // br, col // bc].

Where the sources disagree (what this reference does and why; see README.md):
  * deepseek_v2 routing weights: DeepSeek's V2 code normalises XOR scales (above);
    transformers' native DeepseekV2Moe ignores norm_topk_prob and always scales; vLLM and
    llama.cpp normalise (if norm_topk_prob) and then always scale. All three agree when
    norm_topk_prob is false, which holds for every published V2 checkpoint; the test
    checkpoints here stay in that region. `model.weight_rule` can select another rule.
  * transformers' native DeepseekV2 also has no mscale in the softmax scale and makes every
    layer >= first_k_dense_replace sparse (ignores moe_layer_freq); this reference follows
    DeepSeek's code (and transformers' V3) on both.

Usage:
  m = load_model("models/tiny-deepseek-v3-shakespeare")
  logits = m.forward([1, 846, 2007])     # torch.FloatTensor [T, vocab]
  m.last_topk / m.last_topw              # {layer: [T, k]} of the MoE layers, last forward
  ids = m.greedy([1, 846, 2007], 32)
  out = m.attention(layer, x)            # the MLA block alone: x [T, hidden] (normed) -> [T, hidden]
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

torch.set_num_threads(2)

FAMILIES = ("deepseek_v3", "deepseek_v2", "kimi_k2")
# "v3": normalise if norm_topk_prob (and top_k > 1), then always scale.
# "v2": normalise if norm_topk_prob (and top_k > 1), else scale (DeepSeek's V2 code).
# "hf_v2": never normalise, always scale (transformers' native DeepseekV2Moe).
WEIGHT_RULES = ("v3", "v2", "hf_v2")


def rms_norm(x, weight, eps):
    x = x.float()
    return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def swiglu(x, gate, up, down):
    return (torch.nn.functional.silu(x @ gate.t()) * (x @ up.t())) @ down.t()


def get_mscale(scale, mscale=1.0):
    return 1.0 if scale <= 1.0 else 0.1 * mscale * math.log(scale) + 1.0


def rope_type(config):
    rs = config.get("rope_scaling")
    if not rs:
        return "default"
    return rs.get("type", rs.get("rope_type", "default"))


def rope_inv_freq(config, dim):
    """-> (inv_freq float64 [dim/2], attention_factor) for the rope part (dim = qk_rope_head_dim)."""
    base = float(config.get("rope_theta", 10000.0))
    inv = 1.0 / base ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
    typ = rope_type(config)
    rs = config.get("rope_scaling") or {}
    if typ == "default":
        return inv, 1.0
    factor = float(rs["factor"])
    if typ == "linear":
        return inv / factor, 1.0
    if typ != "yarn":
        raise ValueError("rope_scaling type %r is not implemented" % typ)
    orig = float(rs["original_max_position_embeddings"])
    beta_fast = float(rs.get("beta_fast", 32.0))
    beta_slow = float(rs.get("beta_slow", 1.0))
    mscale = float(rs.get("mscale", 1.0) or 0.0)
    mscale_all_dim = float(rs.get("mscale_all_dim", 0.0) or 0.0)

    def dim_at(n_rot):
        return dim * math.log(orig / (n_rot * 2 * math.pi)) / (2 * math.log(base))

    low = max(math.floor(dim_at(beta_fast)), 0)
    high = min(math.ceil(dim_at(beta_slow)), dim - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(dim // 2, dtype=np.float64) - low) / (high - low), 0.0, 1.0)
    extra_mask = 1.0 - ramp
    inv = (inv / factor) * (1.0 - extra_mask) + inv * extra_mask
    if rs.get("attention_factor") is not None:
        att = float(rs["attention_factor"])
    elif mscale and mscale_all_dim:
        att = get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim)
    else:
        att = get_mscale(factor)
    return inv, att


def softmax_scale(config):
    d = config["qk_nope_head_dim"] + config["qk_rope_head_dim"]
    scale = d ** -0.5
    if rope_type(config) == "yarn":
        rs = config["rope_scaling"]
        m_all = float(rs.get("mscale_all_dim", 0.0) or 0.0)
        if m_all:
            m = get_mscale(float(rs["factor"]), m_all)
            scale = scale * m * m
    return scale


def rope_cos_sin(config, n_pos):
    """cos, sin float32 [n_pos, r/2] (already times attention_factor)."""
    inv, att = rope_inv_freq(config, config["qk_rope_head_dim"])
    ang = np.arange(n_pos, dtype=np.float64)[:, None] * inv[None, :]
    return (torch.from_numpy((np.cos(ang) * att).astype(np.float32)),
            torch.from_numpy((np.sin(ang) * att).astype(np.float32)))


def rope_interleaved(x, cos, sin):
    """x [..., T, r]: pairs (x[2i], x[2i+1]) rotated by the angle of row t, frequency i."""
    x0, x1 = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = x0 * cos - x1 * sin
    out[..., 1::2] = x0 * sin + x1 * cos
    return out


def dequant_fp8(w, scale_inv, block):
    """w float32 [rows, cols] (decoded fp8 values), scale_inv [ceil(rows/br), ceil(cols/bc)]."""
    br, bc = block
    rows, cols = w.shape
    exp = (-(-rows // br), -(-cols // bc))
    if tuple(scale_inv.shape) != exp:
        raise ValueError("scale_inv shape %s, expected %s for weight %s and block %s"
                         % (tuple(scale_inv.shape), exp, tuple(w.shape), block))
    s = np.repeat(np.repeat(np.asarray(scale_inv, dtype=np.float32), br, axis=0), bc, axis=1)
    return (np.asarray(w, dtype=np.float32) * s[:rows, :cols]).astype(np.float32)


def dequantize_checkpoint(tensors, config):
    """Replace every `X` having an `X_scale_inv` by its dequantised f32 value (in place)."""
    q = config.get("quantization_config") or {}
    if not q:
        return tensors
    if q.get("quant_method") != "fp8":
        raise ValueError("quant_method %r not supported" % q.get("quant_method"))
    block = tuple(q.get("weight_block_size", [128, 128]))
    for name in [n for n in tensors if n.endswith("_scale_inv")]:
        w = name[: -len("_scale_inv")]
        if w not in tensors:
            raise KeyError("%s has no weight %s" % (name, w))
        tensors[w] = dequant_fp8(tensors[w], tensors.pop(name), block)
    return tensors


class DeepseekRef:
    def __init__(self, config, tensors):
        c = self.config = config
        self.family = c["model_type"]
        if self.family not in FAMILIES:
            raise ValueError("model_type %r is not one of %s" % (self.family, FAMILIES))
        self.weight_rule = "v2" if self.family == "deepseek_v2" else "v3"
        self.hidden = c["hidden_size"]
        self.n_layers = c["num_hidden_layers"]
        self.n_heads = c["num_attention_heads"]
        self.nope, self.rope = c["qk_nope_head_dim"], c["qk_rope_head_dim"]
        self.v_dim = c["v_head_dim"]
        self.kv_rank = c["kv_lora_rank"]
        self.q_rank = c.get("q_lora_rank")
        self.eps = float(c["rms_norm_eps"])
        self.vocab = c["vocab_size"]
        if c.get("rope_interleave", True) is not True:
            raise ValueError("rope_interleave false is not implemented")
        if c.get("attention_bias", False):
            raise ValueError("attention_bias true is not implemented")
        self.scale = softmax_scale(c)
        self.n_experts = c.get("n_routed_experts") or 0
        self.top_k = c.get("num_experts_per_tok")
        self.scoring = c.get("scoring_func", "softmax")
        self.topk_method = c.get("topk_method", "greedy")
        self.n_group = c.get("n_group") or 1
        self.topk_group = c.get("topk_group") or 1
        self.norm_topk_prob = bool(c.get("norm_topk_prob", False))
        self.rsf = float(c.get("routed_scaling_factor", 1.0))
        first, freq = c.get("first_k_dense_replace", 0), c.get("moe_layer_freq", 1)
        self.sparse = [self.n_experts > 0 and i >= first and i % freq == 0 for i in range(self.n_layers)]
        self.moe_layers = [i for i in range(self.n_layers) if self.sparse[i]]
        eos = c.get("eos_token_id")
        self.eos_ids = set(eos if isinstance(eos, list) else ([] if eos is None else [eos]))

        tensors = dequantize_checkpoint(dict(tensors), c)
        T = {k: torch.from_numpy(np.array(v, dtype=np.float32)) for k, v in tensors.items()}
        used = set()

        def get(name, shape):
            if name not in T:
                raise KeyError("missing tensor %s" % name)
            if tuple(T[name].shape) != tuple(shape):
                raise ValueError("%s has shape %s, expected %s" % (name, tuple(T[name].shape), tuple(shape)))
            used.add(name)
            return T[name]

        H, nh, qk = self.hidden, self.n_heads, self.nope + self.rope
        self.embed = get("model.embed_tokens.weight", (self.vocab, H))
        self.lm_head = (self.embed if c.get("tie_word_embeddings", False)
                        else get("lm_head.weight", (self.vocab, H)))
        self.norm = get("model.norm.weight", (H,))
        shared_w = (c.get("n_shared_experts") or 0) * (c.get("moe_intermediate_size") or 0)
        self.layers = []
        for i in range(self.n_layers):
            p = "model.layers.%d." % i
            a = p + "self_attn."
            L = {"in_norm": get(p + "input_layernorm.weight", (H,)),
                 "post_norm": get(p + "post_attention_layernorm.weight", (H,))}
            if self.q_rank:
                L["q_a"] = get(a + "q_a_proj.weight", (self.q_rank, H))
                L["q_a_norm"] = get(a + "q_a_layernorm.weight", (self.q_rank,))
                L["q_b"] = get(a + "q_b_proj.weight", (nh * qk, self.q_rank))
            else:
                L["q"] = get(a + "q_proj.weight", (nh * qk, H))
            L["kv_a"] = get(a + "kv_a_proj_with_mqa.weight", (self.kv_rank + self.rope, H))
            L["kv_a_norm"] = get(a + "kv_a_layernorm.weight", (self.kv_rank,))
            L["kv_b"] = get(a + "kv_b_proj.weight", (nh * (self.nope + self.v_dim), self.kv_rank))
            L["o"] = get(a + "o_proj.weight", (H, nh * self.v_dim))
            m = p + "mlp."
            if self.sparse[i]:
                E, I = self.n_experts, c["moe_intermediate_size"]
                L["gate"] = get(m + "gate.weight", (E, H))
                if self.topk_method == "noaux_tc":
                    L["bias"] = get(m + "gate.e_score_correction_bias", (E,))
                L["experts"] = [(get(m + "experts.%d.gate_proj.weight" % j, (I, H)),
                                 get(m + "experts.%d.up_proj.weight" % j, (I, H)),
                                 get(m + "experts.%d.down_proj.weight" % j, (H, I))) for j in range(E)]
                if shared_w:
                    L["shared"] = (get(m + "shared_experts.gate_proj.weight", (shared_w, H)),
                                   get(m + "shared_experts.up_proj.weight", (shared_w, H)),
                                   get(m + "shared_experts.down_proj.weight", (H, shared_w)))
            else:
                I = c["intermediate_size"]
                L["mlp"] = (get(m + "gate_proj.weight", (I, H)), get(m + "up_proj.weight", (I, H)),
                            get(m + "down_proj.weight", (H, I)))
            self.layers.append(L)
        unused = sorted(set(T) - used)
        if unused:
            raise ValueError("checkpoint has tensors this architecture does not use: %s" % unused[:5])
        self.last_topk = None
        self.last_topw = None
        self.last_stopped_at_eos = False

    # ------------------------------------------------------------------ blocks
    def attention(self, layer, x, cos=None, sin=None):
        """The MLA block of `layer` (int or layer dict): x [T, hidden] (already input_layernorm'ed),
        positions 0..T-1 -> o_proj output [T, hidden]."""
        L = self.layers[layer] if isinstance(layer, int) else layer
        Tn, nh = x.shape[0], self.n_heads
        if cos is None:
            cos, sin = rope_cos_sin(self.config, Tn)
        if self.q_rank:
            q = rms_norm(x @ L["q_a"].t(), L["q_a_norm"], self.eps) @ L["q_b"].t()
        else:
            q = x @ L["q"].t()
        q = q.view(Tn, nh, self.nope + self.rope).transpose(0, 1)  # [nh, T, qk]
        q_nope, q_rope = q[..., : self.nope], q[..., self.nope:]
        ckv = x @ L["kv_a"].t()
        c_kv, k_rope = ckv[:, : self.kv_rank], ckv[:, self.kv_rank:]  # [T, rank], [T, r]
        kv = (rms_norm(c_kv, L["kv_a_norm"], self.eps) @ L["kv_b"].t())
        kv = kv.view(Tn, nh, self.nope + self.v_dim).transpose(0, 1)  # [nh, T, nope + dv]
        k_nope, v = kv[..., : self.nope], kv[..., self.nope:]
        q_rope = rope_interleaved(q_rope, cos[:Tn], sin[:Tn])
        k_rope = rope_interleaved(k_rope, cos[:Tn], sin[:Tn])  # [T, r], shared by the heads
        qf = torch.cat([q_nope, q_rope], dim=-1)
        kf = torch.cat([k_nope, k_rope.unsqueeze(0).expand(nh, Tn, self.rope)], dim=-1)
        scores = (qf @ kf.transpose(1, 2)) * self.scale
        scores = scores + torch.full((Tn, Tn), float("-inf")).triu(1)
        probs = torch.softmax(scores, dim=-1)
        out = (probs @ v).transpose(0, 1).reshape(Tn, nh * self.v_dim)
        return out @ L["o"].t()

    def route(self, L, x):
        """x [T, hidden] -> (idx [T, k] in descending selection score, weights [T, k])."""
        logits = (x @ L["gate"].t()).float()
        if self.scoring == "softmax":
            s = torch.softmax(logits, dim=-1)
        elif self.scoring == "sigmoid":
            s = torch.sigmoid(logits)
        else:
            raise ValueError("scoring_func %r" % self.scoring)
        Tn, E = s.shape
        G = self.n_group
        if self.topk_method == "greedy":
            sel = s
        elif self.topk_method in ("group_limited_greedy", "noaux_tc"):
            if self.topk_method == "noaux_tc":
                sel = s + L["bias"]
                gs = sel.view(Tn, G, E // G).topk(2, dim=-1)[0].sum(-1)
            else:
                sel = s
                gs = sel.view(Tn, G, E // G).max(dim=-1).values
            gidx = gs.topk(self.topk_group, dim=-1)[1]
            gmask = torch.zeros(Tn, G, dtype=torch.bool)
            gmask.scatter_(1, gidx, True)
            emask = gmask.unsqueeze(-1).expand(Tn, G, E // G).reshape(Tn, E)
            sel = sel.masked_fill(~emask, float("-inf"))
        else:
            raise ValueError("topk_method %r" % self.topk_method)
        idx = sel.topk(self.top_k, dim=-1)[1]
        w = s.gather(1, idx)
        norm = self.top_k > 1 and self.norm_topk_prob
        if self.weight_rule == "hf_v2":
            w = w * self.rsf
        elif norm:
            w = w / (w.sum(dim=-1, keepdim=True) + 1e-20)
            if self.weight_rule == "v3":
                w = w * self.rsf
        else:
            w = w * self.rsf
        return idx, w

    def moe(self, L, x):
        idx, w = self.route(L, x)
        out = torch.zeros_like(x)
        for j, (g, u, d) in enumerate(L["experts"]):
            tok, slot = torch.where(idx == j)
            if tok.numel() == 0:
                continue
            out.index_add_(0, tok, swiglu(x[tok], g, u, d) * w[tok, slot, None])
        if "shared" in L:
            out = out + swiglu(x, *L["shared"])
        return out, idx, w

    def forward(self, token_ids):
        """token_ids: sequence of ints -> float32 logits [T, vocab]."""
        ids = torch.as_tensor(list(token_ids), dtype=torch.long)
        topk, topw = {}, {}
        with torch.no_grad():
            h = self.embed[ids]
            cos, sin = rope_cos_sin(self.config, ids.numel())
            for i, L in enumerate(self.layers):
                h = h + self.attention(L, rms_norm(h, L["in_norm"], self.eps), cos, sin)
                m = rms_norm(h, L["post_norm"], self.eps)
                if self.sparse[i]:
                    y, topk[i], topw[i] = self.moe(L, m)
                else:
                    y = swiglu(m, *L["mlp"])
                h = h + y
            logits = rms_norm(h, self.norm, self.eps) @ self.lm_head.t()
        self.last_topk, self.last_topw = topk, topw
        return logits

    def layer_input(self, token_ids, layer):
        """Residual stream entering `layer` (before its input_layernorm): [T, hidden]."""
        ids = torch.as_tensor(list(token_ids), dtype=torch.long)
        with torch.no_grad():
            h = self.embed[ids]
            cos, sin = rope_cos_sin(self.config, ids.numel())
            for i, L in enumerate(self.layers[:layer]):
                h = h + self.attention(L, rms_norm(h, L["in_norm"], self.eps), cos, sin)
                m = rms_norm(h, L["post_norm"], self.eps)
                h = h + (self.moe(L, m)[0] if self.sparse[i] else swiglu(m, *L["mlp"]))
        return h

    def greedy(self, token_ids, n):
        """Greedy decode n new tokens (full recompute per step). Stops early on EOS (included)."""
        seq, new = list(token_ids), []
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


def load_model(model_dir, config_override=None):
    """config.json (+ overrides) and safetensors from model_dir -> DeepseekRef."""
    global _current
    with open(os.path.join(model_dir, "config.json")) as f:
        config = json.load(f)
    config.update(config_override or {})
    _current = DeepseekRef(config, safetensors_io.load_checkpoint(model_dir))
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
