// `moe bench generate` with --mla-attention: one row per (threads, path), the paths
// interleaved, and the ratio of each path to the first (checked against the rows it
// prints: with one repeat the median of the per-repeat ratios is the ratio of the
// medians); GQA models keep the output without a path column; bad lists are refused by
// name.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "contains_util.h"
#include "moe/ops/kernel_isa.h"
#include "test_util.h"

namespace moe {
namespace {

using moe::testing::CommandResult;
using moe::testing::moe_binary;
using moe::testing::run_command;
using moe::testing::sh_quote;
using moe::testing::source_dir;
using moe::testing::tiny_model_dir;

std::string deepseek_dir() { return source_dir() + "/models/tiny-deepseek-v3-shakespeare"; }

// Small and fast: a short prompt, few tokens, a small bandwidth probe.
const std::string kQuick = " --prompt-tokens 24 --gen-tokens 4 --bw-buffer-mb 8";

// stdout alone (progress goes to stderr with carriage returns).
CommandResult bench_stdout(const std::string& args) {
  return run_command("( " + moe_binary() + " bench generate " + args + " 2>/dev/null )");
}

CommandResult bench_all(const std::string& args) { return run_command(moe_binary() + " bench generate " + args); }

std::vector<std::vector<std::string>> rows_of(const std::string& out) {
  std::vector<std::vector<std::string>> rows;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::vector<std::string> words;
    std::string w;
    while (ls >> w) words.push_back(w);
    rows.push_back(words);
  }
  return rows;
}

// The first row whose first words are `head` (words compared exactly).
std::vector<std::string> find_row(const std::string& out, const std::vector<std::string>& head) {
  for (const auto& r : rows_of(out)) {
    if (r.size() >= head.size() && std::equal(head.begin(), head.end(), r.begin())) return r;
  }
  ADD_FAILURE() << "no row starting with '" << head[0] << (head.size() > 1 ? " " + head[1] : "") << "' in:\n" << out;
  return {};
}

void expect_error_exit(const CommandResult& r, std::initializer_list<std::string> needles) {
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_CONTAINS(r.output, "error: ");
  for (const auto& n : needles) EXPECT_CONTAINS(r.output, n);
}

TEST(BenchGenerateCliTest, MlaPathsInterleavedWithRatios) {
  auto r = bench_stdout("--model " + sh_quote(deepseek_dir()) + " --threads 1,2 --repeats 1 --mla-attention naive,absorbed,auto" +
                        kQuick);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "multi-head latent attention: naive, absorbed, auto");
  EXPECT_CONTAINS(r.output, "ratios to naive");
  for (const char* t : {"1", "2"}) {
    // threads path prefill-min prefill-med decode-min decode-med
    const auto naive = find_row(r.output, {t, "naive"});
    ASSERT_EQ(naive.size(), 6u);
    for (const char* path : {"absorbed", "auto"}) {
      const auto row = find_row(r.output, {t, path});
      ASSERT_EQ(row.size(), 6u);
      for (size_t i = 2; i < 6; ++i) EXPECT_GT(std::stod(row[i]), 0) << path;
      EXPECT_EQ(row[2], row[3]) << "one repeat: min = median";
      // threads label prefill-ratio decode-ratio
      const auto ratio = find_row(r.output, {t, std::string(path) + "/naive"});
      ASSERT_EQ(ratio.size(), 4u);
      const double want_prefill = std::stod(row[3]) / std::stod(naive[3]);
      const double want_decode = std::stod(row[5]) / std::stod(naive[5]);
      // The rows print one decimal of tok/s: allow that rounding (relative 0.1 / value).
      EXPECT_NEAR(std::stod(ratio[2]), want_prefill, 0.01 * want_prefill + 2e-3) << path << " threads " << t;
      EXPECT_NEAR(std::stod(ratio[3]), want_decode, 0.01 * want_decode + 2e-3) << path << " threads " << t;
    }
    // The bandwidth table: a row per (threads, path) too.
    int bw_rows = 0;
    for (const auto& row : rows_of(r.output)) {
      if (row.size() == 6 && row[0] == t && row[5].back() == '%') ++bw_rows;
    }
    EXPECT_EQ(bw_rows, 3) << r.output;
  }
}

TEST(BenchGenerateCliTest, MlaDefaultIsOneAutoRow) {
  auto r = bench_stdout("--model " + sh_quote(deepseek_dir()) + " --threads 1 --repeats 1" + kQuick);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(find_row(r.output, {"1", "auto"}).size(), 6u);
  EXPECT_EQ(r.output.find("ratios to"), std::string::npos) << r.output;
}

TEST(BenchGenerateCliTest, GqaModelKeepsItsColumns) {
  auto r = bench_stdout("--model " + sh_quote(tiny_model_dir()) + " --threads 1 --repeats 1" + kQuick);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("mla path"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("latent"), std::string::npos) << r.output;
  // threads prefill-min prefill-med decode-min decode-med: numbers only.
  const auto row = find_row(r.output, {"1"});
  ASSERT_EQ(row.size(), 5u) << r.output;
  for (size_t i = 1; i < 5; ++i) EXPECT_GT(std::stod(row[i]), 0);
}

TEST(BenchGenerateCliTest, BadMlaListsRefusedByName) {
  const std::string ds = "--model " + sh_quote(deepseek_dir()) + " --repeats 1" + kQuick;
  expect_error_exit(bench_all(ds + " --mla-attention naive,fast"),
                    {"--mla-attention 'fast' is not one of auto, naive, absorbed"});
  expect_error_exit(bench_all(ds + " --mla-attention absorbed,absorbed"), {"--mla-attention lists 'absorbed' twice"});
  // A path list on a GQA model would measure the same thing twice: refused, naming the model.
  expect_error_exit(bench_all("--model " + sh_quote(tiny_model_dir()) + " --repeats 1 --mla-attention naive,absorbed"),
                    {"--mla-attention applies to multi-head latent attention models", "model_type 'mixtral'"});
  expect_error_exit(bench_all("--model " + sh_quote(tiny_model_dir()) + " --repeats 1 --mla-attention naive"),
                    {"--mla-attention", "model_type 'mixtral'"});
}

// Kernel paths and weight formats: one engine per combination, labelled by
// the dimensions that vary, with ratios to the first; names are checked by the engine.
TEST(BenchGenerateCliTest, KernelAndWeightListsInterleaved) {
  auto r = bench_stdout("--model " + sh_quote(tiny_model_dir()) + " --threads 1 --repeats 1 --kernels avx2,auto " +
                        "--weights native,int8" + kQuick);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "cpu kernel paths: avx2");
  EXPECT_CONTAINS(r.output, "variants (kernels+weights): avx2+native, avx2+int8, auto+native, auto+int8");
  for (const char* v : {"avx2+native", "avx2+int8", "auto+native", "auto+int8"}) {
    const auto row = find_row(r.output, {"1", v});
    ASSERT_EQ(row.size(), 6u) << v;
    for (size_t i = 2; i < 6; ++i) EXPECT_GT(std::stod(row[i]), 0) << v;
  }
  EXPECT_EQ(find_row(r.output, {"1", "auto+int8/avx2+native"}).size(), 4u);
}

// --hugepages takes a list the same way (weights in huge pages against the mapped files).
TEST(BenchGenerateCliTest, HugePagesListInterleaved) {
  auto r = bench_stdout("--model " + sh_quote(tiny_model_dir()) + " --threads 1 --repeats 1 --hugepages off,on" + kQuick);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "variants (kernels+weights+hugepages): hugepages-off, hugepages-on");
  EXPECT_EQ(find_row(r.output, {"1", "hugepages-on/hugepages-off"}).size(), 4u);
  const auto bad = bench_all("--model " + sh_quote(tiny_model_dir()) + " --repeats 1 --hugepages sometimes" + kQuick);
  EXPECT_EQ(bad.exit_code, 2);  // a usage error, refused by the flag's own check
  EXPECT_CONTAINS(bad.output, "--hugepages: sometimes not in {auto,on,off}");
}

// --matmul-precision takes a list the same way (bf16 prefill GEMM against sgemm), where
// the CPU has AVX512_BF16; elsewhere medium is refused naming the kernels.
TEST(BenchGenerateCliTest, MatmulPrecisionListInterleaved) {
  const std::string tiny = "--model " + sh_quote(tiny_model_dir()) + " --threads 1 --repeats 1" + kQuick;
  auto r = bench_stdout(tiny + " --matmul-precision highest,medium");
  if (!cpu_supports(KernelIsa::kAvx512Bf16)) {
    expect_error_exit(bench_all(tiny + " --matmul-precision highest,medium"),
                      {"--matmul-precision medium: matmul_precision 'medium' (bf16 prefill GEMM) needs the avx512-bf16"});
    GTEST_SKIP() << "no AVX512_BF16: only the refusal was checked";
  }
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "variants (kernels+weights+matmul): matmul-highest, matmul-medium");
  EXPECT_EQ(find_row(r.output, {"1", "matmul-medium/matmul-highest"}).size(), 4u);
  const auto bad = bench_all(tiny + " --matmul-precision low");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_CONTAINS(bad.output, "--matmul-precision: low not in {highest,medium}");
}

TEST(BenchGenerateCliTest, BadKernelOrWeightNamesRefusedByName) {
  const std::string tiny = "--model " + sh_quote(tiny_model_dir()) + " --repeats 1" + kQuick;
  expect_error_exit(bench_all(tiny + " --kernels avx2,avx9"), {"kernels 'avx9' is not one of auto, avx2, avx512"});
  expect_error_exit(bench_all(tiny + " --weights int4"), {"weights 'int4' is not one of native, int8"});
}

TEST(BenchGenerateCliTest, HelpListsMlaAttention) {
  auto r = bench_all("--help");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "--mla-attention");
}

}  // namespace
}  // namespace moe
