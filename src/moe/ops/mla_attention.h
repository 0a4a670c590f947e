// The attention kernels of multi-head latent attention (MLA; DeepSeek-V2 paper,
// arXiv:2405.04434, section 2.1), run by transformer/mla_attention.h. Both are causal:
// query row t of a sequence sits at position start_pos + t and attends to positions
// [0, start_pos + t]. Softmax in f32 with the caller's scale (MLA: qk_head_dim^-0.5,
// times YaRN's mscale^2). One query at a time with the shared inner loop of the GQA
// kernels (attend_query.h), so a token's output does not depend on how its sequence
// was chunked, on the other sequences of the step, or on the thread count. Work is
// split over OpenMP threads by (query, head). Raw pointers, CPU; shapes are the caller's
// contract (not checked).
#pragma once

#include <cstddef>
#include <cstdint>

namespace moe {

// The latent KV cache of one layer as rows of `row` floats per position: contiguous
// (block_size == 0: position p at base + p * row) or paged (position p at
// base + (block_table[p / block_size] * block_size + p % block_size) * row).
struct LatentRows {
  const float* base = nullptr;
  int64_t row = 0;
  int block_size = 0;
};

// One sequence's query rows of a step.
struct MlaSeq {
  const float* q = nullptr;              // [m, heads, qk_dim]
  float* out = nullptr;                  // [m, heads, v_dim]
  int64_t m = 0;
  int64_t start_pos = 0;
  const int32_t* block_table = nullptr;  // paged caches: blocks covering [0, start_pos + m)
};

struct MlaAttentionShape {
  int heads = 0;
  int qk_dim = 0;   // query/key width
  int v_dim = 0;    // value width
  float scale = 0;  // softmax scale
};

// Absorbed form ("attend in the latent space"): one shared key/value row per position,
// the latent cache row [c_kv (v_dim) | k_rope (qk_dim - v_dim)]; keys are the whole row,
// values its first v_dim floats. q rows hold [q_nope W_UK (v_dim) | q_rope] per head;
// out rows receive the latent output per head (before W_UV).
void mla_latent_attention(const MlaSeq* seqs, size_t num_seqs, const LatentRows& cache, const MlaAttentionShape& s);

// Naive form: per-head keys [ctx, heads, qk_dim] and values [ctx, heads, v_dim],
// contiguous (expanded from the latent cache by the caller), for one sequence whose
// positions [0, start_pos + seq.m) they cover; seq.block_table is unused.
void mla_expanded_attention(const MlaSeq& seq, const float* keys, const float* values, const MlaAttentionShape& s);

}  // namespace moe
