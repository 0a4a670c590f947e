#!/usr/bin/python3
"""Golden data for RoPE variants: tests/data/golden/rope/rope_cases.json.

An independent float32 torch implementation of transformers' rotary embeddings
(modeling_rope_utils.py: _compute_default_rope_parameters, _compute_linear_scaling_rope_parameters,
_compute_yarn_parameters; apply_rotary_pos_emb with rotate_half; DeepSeek-V3's
apply_rotary_pos_emb_interleave, which de-interleaves q (view(d/2, 2).transpose) and then
applies rotate_half). Nothing here comes from the C++ code under test.

For each case: the parameters, inv_freq [d/2], the cos/sin attention factor, the MLA
softmax-scale multiplier, and x [positions, heads, d] -> rotated [positions, heads, d]
exactly as transformers returns it (for the interleaved layout that is the de-interleaved
order: element i of the output is pair i's first element, i + d/2 its second).

Run from the repo root:  /usr/bin/python3 tools/reference/make_rope_golden.py
Deterministic (seeded); rerunning gives a byte-identical file.
"""
import json
import math
import os

import numpy as np
import torch

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data", "golden", "rope", "rope_cases.json")


def get_mscale(scale, m=1.0):
    if scale <= 1:
        return 1.0
    return 0.1 * m * math.log(scale) + 1.0


def inv_freq_and_attention_factor(c):
    d, base = c["dim"], c["theta"]
    pos_freqs = base ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d)
    inv = 1.0 / pos_freqs
    kind = c["scaling"]
    if kind == "none":
        return inv, 1.0
    factor = c["factor"]
    if kind == "linear":
        return inv / factor, 1.0
    assert kind == "yarn"
    af = c.get("attention_factor")
    mscale, mscale_all_dim = c.get("mscale"), c.get("mscale_all_dim")
    if af is None:
        if mscale and mscale_all_dim:
            af = get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim)
        else:
            af = get_mscale(factor)
    orig = c["original_max_position_embeddings"]

    def corr_dim(rot):
        return (d * math.log(orig / (rot * 2 * math.pi))) / (2 * math.log(base))

    low = max(math.floor(corr_dim(c["beta_fast"])), 0)
    high = min(math.ceil(corr_dim(c["beta_slow"])), d - 1)
    if low == high:
        high += 0.001
    ramp = torch.clamp((torch.arange(d // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
    extra_factor = 1 - ramp
    inter = 1.0 / (factor * pos_freqs)
    return inter * (1 - extra_factor) + inv * extra_factor, af


def softmax_multiplier(c):
    if c["scaling"] != "yarn" or not c.get("mscale_all_dim"):
        return 1.0
    m = get_mscale(c["factor"], c["mscale_all_dim"])
    return m * m


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def rotate(c, inv, af, x, positions):
    # x [T, heads, d]; cos/sin [T, d] as transformers' RotaryEmbedding.forward.
    freqs = torch.tensor(positions, dtype=torch.float32)[:, None] @ inv[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = (emb.cos() * af)[:, None, :], (emb.sin() * af)[:, None, :]
    if c["layout"] == "interleaved":
        t, h, d = x.shape
        x = x.view(t, h, d // 2, 2).transpose(3, 2).reshape(t, h, d)
    return x * cos + rotate_half(x) * sin


CASES = [
    dict(name="plain_rotate_half", dim=8, theta=10000.0, layout="rotate_half", scaling="none", heads=2),
    dict(name="plain_interleaved", dim=8, theta=10000.0, layout="interleaved", scaling="none", heads=2),
    dict(name="linear_factor2", dim=16, theta=1e6, layout="rotate_half", scaling="linear", factor=2.0, heads=2),
    dict(name="linear_interleaved_factor4", dim=8, theta=10000.0, layout="interleaved", scaling="linear", factor=4.0,
         heads=1),
    # DeepSeek-V3 / R1 (config.json rope_scaling), qk_rope_head_dim 64.
    dict(name="yarn_deepseek_v3", dim=64, theta=10000.0, layout="interleaved", scaling="yarn", factor=40.0,
         original_max_position_embeddings=4096, beta_fast=32.0, beta_slow=1.0, mscale=1.0, mscale_all_dim=1.0, heads=1),
    # Kimi-K2-Instruct.
    dict(name="yarn_kimi_k2", dim=64, theta=50000.0, layout="interleaved", scaling="yarn", factor=32.0,
         original_max_position_embeddings=4096, beta_fast=1.0, beta_slow=1.0, mscale=1.0, mscale_all_dim=1.0, heads=1),
    # DeepSeek-V2-Lite (mscale 0.707 both: attention factor 1, softmax multiplier != 1).
    dict(name="yarn_deepseek_v2_lite", dim=64, theta=10000.0, layout="interleaved", scaling="yarn", factor=40.0,
         original_max_position_embeddings=4096, beta_fast=32.0, beta_slow=1.0, mscale=0.707, mscale_all_dim=0.707,
         heads=1),
    # Qwen-style YaRN (no mscale keys): attention factor get_mscale(factor), rotate_half.
    dict(name="yarn_qwen_style", dim=32, theta=1e6, layout="rotate_half", scaling="yarn", factor=4.0,
         original_max_position_embeddings=32768, beta_fast=32.0, beta_slow=1.0, heads=2),
    # An explicit attention_factor overrides the mscale ratio.
    dict(name="yarn_attention_factor", dim=16, theta=10000.0, layout="rotate_half", scaling="yarn", factor=8.0,
         original_max_position_embeddings=256, beta_fast=32.0, beta_slow=1.0, mscale=1.0, mscale_all_dim=1.0,
         attention_factor=0.75, heads=1),
    # low == high == 0 (tiny original context): transformers widens the ramp by 0.001.
    dict(name="yarn_degenerate_range", dim=8, theta=10000.0, layout="rotate_half", scaling="yarn", factor=2.0,
         original_max_position_embeddings=4, beta_fast=1.0, beta_slow=1.0, heads=1),
]

# Past RopeTable's tabulated prefix (8192) too, up to DeepSeek-V3's last position.
POSITIONS = [0, 1, 2, 7, 100, 4095, 4096, 8191, 8192, 9001, 65537, 163839]
MAX_POSITIONS = 163840


def f32s(t):
    """Shortest decimal strings that read back as the same float32 values."""
    return [float(repr(np.float32(v))) for v in t.flatten().tolist()]


def main():
    gen = torch.Generator().manual_seed(20261202)
    out = {"generator": "tools/reference/make_rope_golden.py", "positions": POSITIONS, "max_positions": MAX_POSITIONS,
           "cases": []}
    for c in CASES:
        inv, af = inv_freq_and_attention_factor(c)
        x = (torch.rand(len(POSITIONS), c["heads"], c["dim"], generator=gen) * 4 - 2).float()
        y = rotate(c, inv, af, x, POSITIONS)
        rec = dict(c)
        rec.update(inv_freq=f32s(inv), attention_factor=float(af), softmax_scale_multiplier=softmax_multiplier(c),
                   x=f32s(x), rotated=f32s(y))
        out["cases"].append(rec)
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    cases = out.pop("cases")
    with open(OUT, "w") as f:  # one case per line
        head = json.dumps(out)
        f.write(head[:-1] + ', "cases": [\n' + ",\n".join(json.dumps(c) for c in cases) + "\n]}\n")
    print("wrote", os.path.normpath(OUT), os.path.getsize(OUT), "bytes")


if __name__ == "__main__":
    main()
