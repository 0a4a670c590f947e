#include "moe/ops/linear_bf16_gemm.h"

#include <omp.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <oneapi/dnnl/dnnl.hpp>
#include <tuple>

#include "moe/core/check.h"

namespace moe {
namespace {

using dnnl::memory;

const dnnl::engine& cpu_engine() {
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

// One matmul per (k, rows, ldy), with the token count m a run-time dimension: prefill
// chunks and expert batches come in every m, and a primitive per m would grow without
// bound in a long-running server (each holds JIT code).
struct Prepared {
  dnnl::matmul matmul;
};

// Created with one OpenMP thread (its blocking then assumes one thread, whatever the
// caller's team).
const Prepared& prepared(int64_t k, int64_t rows, int64_t ldy) {
  static thread_local std::map<std::tuple<int64_t, int64_t, int64_t>, Prepared> cache;
  auto [it, fresh] = cache.try_emplace({k, rows, ldy});
  if (fresh) {
    const memory::dim any_m = DNNL_RUNTIME_DIM_VAL;
    const memory::desc x({any_m, k}, memory::data_type::bf16, memory::dims{k, 1});
    const memory::desc w({k, rows}, memory::data_type::bf16, memory::dims{1, k});  // w^T: w's rows as columns
    const memory::desc y({any_m, rows}, memory::data_type::f32, memory::dims{ldy, 1});
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(x, w, y), cpu_engine());
    it->second.matmul = dnnl::matmul(pd);
  }
  return it->second;
}

}  // namespace

bool bf16_gemm_available() { return true; }

void gemm_bf16_rows(const Bf16GemmArgs& a) {
  const int64_t m = a.m, k = a.k, rows = a.rows, ldy = a.ldy;
  MOE_CHECK(m > 0 && k > 0 && rows > 0 && ldy >= rows);
  const int saved_threads = omp_get_max_threads();
  omp_set_num_threads(1);
  try {
    const Prepared& p = prepared(k, rows, ldy);
    static thread_local dnnl::stream stream(cpu_engine());
    memory xm({{m, k}, memory::data_type::bf16, memory::dims{k, 1}}, cpu_engine(), const_cast<uint16_t*>(a.x));
    memory wm({{k, rows}, memory::data_type::bf16, memory::dims{1, k}}, cpu_engine(), const_cast<uint16_t*>(a.w));
    memory ym({{m, rows}, memory::data_type::f32, memory::dims{ldy, 1}}, cpu_engine(), a.y);
    p.matmul.execute(stream, {{DNNL_ARG_SRC, xm}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_DST, ym}});
    stream.wait();
  } catch (const dnnl::error& e) {
    std::fprintf(stderr, "oneDNN bf16 matmul [%lld x %lld] x [%lld x %lld]^T failed: %s\n", static_cast<long long>(m),
                 static_cast<long long>(k), static_cast<long long>(rows), static_cast<long long>(k), e.what());
    std::abort();
  }
  omp_set_num_threads(saved_threads);
}

}  // namespace moe
