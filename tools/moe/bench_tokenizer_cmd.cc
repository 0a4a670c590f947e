// moe bench tokenizer: encode throughput (MB/s of UTF-8 prompt text) of our tokenizer
// (moe::Tokenizer, one thread) against the npm references run by node: `tokenizers`
// (the Rust library's binding; encodeBatch with TOKENIZERS_PARALLELISM=false, so one
// thread) and `@huggingface/tokenizers` (pure JS). Runs are interleaved: ours, then one
// node run (which times each reference once after a warm-up pass), repeated; medians and
// ratios are printed. Prompts: a ShareGPT JSON file ([{conversations: [{value}]}]) or a
// JSON array of strings.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "moe/model/tokenizer.h"

namespace moe::cli {
namespace {

struct TokenizerBenchFlags {
  std::string tokenizer;
  std::string prompts;
  int repeats = 5;
  std::string node_modules;  // default: $MOE_NODE_MODULES
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

int run(const TokenizerBenchFlags& f) {
  std::ifstream in(f.prompts);
  if (!in) return fail("--prompts: cannot read " + f.prompts);
  std::stringstream ss;
  ss << in.rdbuf();
  auto j = nlohmann::json::parse(ss.str(), nullptr, false);
  if (j.is_discarded() || !j.is_array()) return fail("--prompts " + f.prompts + ": not a JSON array");
  std::vector<std::string> prompts;
  for (const auto& r : j) {
    if (r.is_string()) {
      prompts.push_back(r);
    } else if (r.is_object() && r.contains("conversations") && r["conversations"].is_array() &&
               !r["conversations"].empty() && r["conversations"][0].contains("value")) {
      prompts.push_back(r["conversations"][0]["value"]);
    }
  }
  if (prompts.empty()) return fail("--prompts " + f.prompts + ": no prompts found");
  size_t bytes = 0;
  for (const auto& p : prompts) bytes += p.size();
  auto tok = Tokenizer::load(f.tokenizer);
  if (!tok.ok()) return fail(tok.status().message());

  std::string modules = f.node_modules;
  if (modules.empty() && std::getenv("MOE_NODE_MODULES") != nullptr) modules = std::getenv("MOE_NODE_MODULES");
  const std::string script = std::string(MOE_SOURCE_DIR) + "/tools/tokenizers/bench_encode.cjs";
  const std::string list =
      (std::filesystem::temp_directory_path() / ("moe_bench_tok_" + std::to_string(::getpid()) + ".json")).string();
  if (!modules.empty()) {
    std::ofstream out(list);
    out << nlohmann::json(prompts).dump();
  }

  std::printf("prompts: %zu (%.2f MB) from %s; tokenizer %s (%s)\n", prompts.size(), bytes / 1e6, f.prompts.c_str(),
              f.tokenizer.c_str(), (*tok)->file_name());
  size_t tokens = 0;
  for (const auto& p : prompts) tokens += (*tok)->encode(p).size();  // warm-up pass
  std::vector<double> ours, rust, js;
  for (int r = 0; r < f.repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    size_t n = 0;
    for (const auto& p : prompts) n += (*tok)->encode(p).size();
    ours.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    if (n != tokens) return fail("encode is not deterministic");
    if (modules.empty()) continue;
    const std::string cmd = "NODE_PATH='" + modules + "' TOKENIZERS_PARALLELISM=false node '" + script + "' '" +
                            f.tokenizer + "' '" + list + "'";
    FILE* pipe = popen(cmd.c_str(), "r");
    std::string outp;
    char buf[512];
    while (pipe != nullptr && fgets(buf, sizeof(buf), pipe) != nullptr) outp += buf;
    if (pipe == nullptr || pclose(pipe) != 0) return fail("node reference failed: " + cmd + "\n" + outp);
    auto res = nlohmann::json::parse(outp, nullptr, false);
    if (res.is_discarded()) return fail("node reference printed no JSON: " + outp);
    rust.push_back(res["rust_seconds"].get<double>());
    js.push_back(res["js_seconds"].get<double>());
  }
  std::filesystem::remove(list);
  const double mb = bytes / 1e6;
  std::printf("tokens: %zu (%.2f bytes/token)\n", tokens, static_cast<double>(bytes) / static_cast<double>(tokens));
  std::printf("ours (moe::Tokenizer, 1 thread):              %8.2f MB/s (median of %d)\n", mb / median(ours), f.repeats);
  if (modules.empty()) {
    std::printf("npm references skipped: set MOE_NODE_MODULES or --node-modules\n");
    return 0;
  }
  std::printf("npm tokenizers (Rust, encodeBatch, 1 thread): %8.2f MB/s   ours / it: %.2f\n", mb / median(rust),
              median(rust) / median(ours));
  std::printf("npm @huggingface/tokenizers (JS):             %8.2f MB/s   ours / it: %.2f\n", mb / median(js),
              median(js) / median(ours));
  return 0;
}

}  // namespace

RunFn add_bench_tokenizer_command(CLI::App& bench) {
  auto f = std::make_shared<TokenizerBenchFlags>();
  bench.add_option("--tokenizer", f->tokenizer, "Directory with tokenizer.json or tokenizer.model")->required();
  bench.add_option("--prompts", f->prompts, "ShareGPT JSON file or a JSON array of strings")->required();
  bench.add_option("--repeats", f->repeats, "Interleaved repetitions (medians are reported)")->capture_default_str();
  bench.add_option("--node-modules", f->node_modules,
                   "node_modules with tokenizers and @huggingface/tokenizers (default: $MOE_NODE_MODULES)");
  return [f] { return run(*f); };
}

}  // namespace moe::cli
