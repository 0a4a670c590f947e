// `moe bench moe-layer` and `moe bench capacity` with tiny sizes: a row per token count
// and router, the capacity arithmetic (huge factor: nothing dropped; factor 0.5 under
// drop: at least the share that cannot fit is dropped; reroute never drops more than
// drop), the real routing data when ../shared next to the source tree holds it, and bad flags and files:
// exit 1 (error) or 2 (usage) with a message naming the flag.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "contains_util.h"
#include "safetensors_util.h"
#include "test_util.h"

namespace moe {
namespace {

using nlohmann::json;
using moe::testing::CommandResult;
using moe::testing::moe_binary;
using moe::testing::run_command;
using moe::testing::ScopedTempDir;
using moe::testing::sh_quote;
using moe::testing::write_file;

const std::string kRouting = moe::testing::shared_data_dir() + "/routing";

CommandResult moe_cmd(const std::string& args) { return run_command(moe_binary() + " " + args); }

// stdout alone (the progress lines go to stderr), parsed as JSON.
json moe_json(const std::string& args) {
  CommandResult r = run_command("( " + moe_binary() + " " + args + " 2>/dev/null )");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  json j = json::parse(r.output, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << r.output;
  return j;
}

void expect_error_exit(const CommandResult& r, std::initializer_list<std::string> needles) {
  EXPECT_TRUE(r.exit_code == 1 || r.exit_code == 2) << "exit code " << r.exit_code << ", output:\n" << r.output;
  if (r.exit_code == 1) {
    EXPECT_CONTAINS(r.output, "error: ");
  }
  for (const auto& n : needles) EXPECT_CONTAINS(r.output, n);
}

// The smallest dropped fraction any policy can reach: at most E * capacity of the
// B * k assignments fit.
double must_drop(int B, int k, int E, double F) {
  const double cap = std::ceil(static_cast<double>(B) * k * F / E);
  return std::max(0.0, 1.0 - E * cap / (static_cast<double>(B) * k));
}

const json& run_of(const json& source, int batch, const std::string& policy) {
  for (const json& r : source["runs"]) {
    if (r["batch"] == batch && r["policy"] == policy) return r;
  }
  ADD_FAILURE() << "no run for batch " << batch << " policy " << policy;
  static const json none = json::object();
  return none;
}

const std::string kTiny = "--hidden 32 --moe-inter 16 --iters 1";

TEST(BenchMoeLayerCliTest, RowPerTokenCountAndRouter) {
  json j = moe_json("bench moe-layer --router mixtral,deepseek --tokens 1,3,8 " + kTiny + " --format json");
  ASSERT_EQ(j["routers"].size(), 2u);
  EXPECT_EQ(j["routers"][0]["router"], "mixtral");
  EXPECT_EQ(j["routers"][1]["router"], "deepseek");
  EXPECT_EQ(j["routers"][1]["num_experts"], 256);
  for (const json& r : j["routers"]) {
    ASSERT_EQ(r["rows"].size(), 3u);
    const int want[] = {1, 3, 8};
    for (size_t i = 0; i < 3; ++i) {
      const json& row = r["rows"][i];
      EXPECT_EQ(row["tokens"], want[i]);
      EXPECT_GT(row["total_us"].get<double>(), 0);
      EXPECT_GT(row["ffn_us"].get<double>(), 0);
      EXPECT_GT(row["tokens_per_s"].get<double>(), 0);
      EXPECT_EQ(row["dropped_fraction"], 0.0);  // dropless by default
    }
  }
}

TEST(BenchMoeLayerCliTest, TableHasARowPerTokenCount) {
  CommandResult r = run_command("( " + moe_binary() + " bench moe-layer --router qwen2 --tokens 2,5 " + kTiny + " 2>/dev/null )");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "== qwen2:");
  EXPECT_CONTAINS(r.output, "\n      2 |");
  EXPECT_CONTAINS(r.output, "\n      5 |");
}

TEST(BenchMoeLayerCliTest, CapacityPolicies) {
  // qwen3: 128 experts, top-8; 64 tokens x 8 = 512 assignments, capacity 2 at F = 0.5.
  const std::string base = "bench moe-layer --router qwen3 --tokens 64 " + kTiny + " --format json";
  const double drop = moe_json(base + " --overflow drop --capacity-factor 0.5")["routers"][0]["rows"][0]["dropped_fraction"];
  const double rer = moe_json(base + " --overflow reroute --capacity-factor 0.5")["routers"][0]["rows"][0]["dropped_fraction"];
  const double huge = moe_json(base + " --overflow drop --capacity-factor 1000")["routers"][0]["rows"][0]["dropped_fraction"];
  EXPECT_GE(drop, must_drop(64, 8, 128, 0.5) - 1e-12);
  EXPECT_LE(rer, drop);
  EXPECT_GE(rer, must_drop(64, 8, 128, 0.5) - 1e-12);
  EXPECT_EQ(huge, 0.0);
}

class BenchCapacityCliTest : public ::testing::Test {
 protected:
  BenchCapacityCliTest() : dir_("bench_capacity_cli") {}
  std::string write(const std::string& name, const std::string& text) {
    write_file(dir_.file(name), text);
    return dir_.file(name);
  }
  // SGLang's format: a dense all-zero layer, then two skewed layers of 32 experts.
  std::string skewed_sglang() {
    json lc = json::array();
    lc.push_back(std::vector<double>(32, 0.0));
    for (double s : {1.0, 1.5}) {
      std::vector<double> c;
      for (int e = 0; e < 32; ++e) c.push_back(std::round(100000.0 / std::pow(e + 1.0, s)));
      lc.push_back(c);
    }
    return write("skewed.json", json{{"logical_count", lc}}.dump());
  }
  ScopedTempDir dir_;
};

TEST_F(BenchCapacityCliTest, SkewedSourceArithmetic) {
  const std::string file = skewed_sglang();
  json j = moe_json("bench capacity --routing-file " + sh_quote(file) +
                    " --batch 64,100 --capacity-factor 0.5,1,1000 --steps 2 --format json");
  ASSERT_EQ(j["sources"].size(), 1u);
  const json& s = j["sources"][0];
  EXPECT_EQ(s["layers"], 2);  // the all-zero layer is skipped
  EXPECT_EQ(s["num_experts"], 32);
  EXPECT_EQ(s["top_k"], 8);
  EXPECT_GT(s["imbalance_real_mean"].get<double>(), 3.0);
  for (int B : {64, 100}) {
    const json& drop = run_of(s, B, "drop")["dropped_fraction"];
    const json& rer = run_of(s, B, "reroute")["dropped_fraction"];
    ASSERT_EQ(drop.size(), 3u);
    ASSERT_EQ(rer.size(), 3u);
    EXPECT_GE(drop[0].get<double>(), must_drop(B, 8, 32, 0.5) - 1e-12) << "B=" << B;
    EXPECT_GE(drop[0].get<double>(), 0.5 - 31.0 / (B * 8));
    EXPECT_EQ(drop[2].get<double>(), 0.0);
    EXPECT_EQ(rer[2].get<double>(), 0.0);
    for (size_t i = 0; i < 3; ++i) EXPECT_LE(rer[i].get<double>(), drop[i].get<double>() + 1e-12) << i;
    // Skewed: F = 1 still drops under drop; reroute places everything but moves some.
    EXPECT_GT(drop[1].get<double>(), 0.05);
    EXPECT_GT(run_of(s, B, "reroute")["rerouted_fraction"][1].get<double>(), 0.05);
  }
  EXPECT_GT(s["bound"][0].get<double>(), 0.5);
  EXPECT_EQ(s["bound"][2].get<double>(), 0.0);
}

TEST_F(BenchCapacityCliTest, OlmoeFormatAndTable) {
  json m = {{"model", "Tiny-8 (test)"}, {"num_experts", 8}, {"top_k", 2}};
  m["topk"]["prose"]["layer_0"] = {10, 10, 10, 10, 10, 10, 10, 10};
  m["topk"]["prose"]["layer_7"] = {70, 2, 2, 2, 1, 1, 1, 1};
  const std::string file = write("olmoe.json", json{{"models", {{"tiny", m}}}}.dump());
  CommandResult r = moe_cmd("bench capacity --routing-file " + sh_quote(file) +
                            " --olmoe-models tiny --batch 32 --capacity-factor 0.5,2 --steps 1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "== tiny prose (olmoe.json, layers 0,7): E=8 k=2, 2 layers ==");
  EXPECT_CONTAINS(r.output, "drop B=32");
  EXPECT_CONTAINS(r.output, "reroute B=32");
  EXPECT_CONTAINS(r.output, "Summary by model");
  EXPECT_CONTAINS(r.output, "== Tiny-8 (k=2)");
  expect_error_exit(moe_cmd("bench capacity --routing-file " + sh_quote(file) + " --olmoe-models nosuch"),
                    {"--olmoe-models", "nosuch"});
}

TEST(BenchCapacityRealDataTest, DeepseekAndOlmoe) {
  const std::string sg = std::string(kRouting) + "/sglang_deepseek_v3_ep_statistics/prefill_in512.json";
  const std::string ol = std::string(kRouting) + "/olmoe_paper_expert_counts.json";
  MOE_SKIP_IF_MISSING(sg);
  MOE_SKIP_IF_MISSING(ol);
  json j = moe_json("bench capacity --routing-file " + sh_quote(sg) + " --routing-file " + sh_quote(ol) +
                    " --olmoe-models mistral --batch 128 --capacity-factor 0.5,1000 --steps 1 --threads 2 --format json");
  ASSERT_EQ(j["sources"].size(), 6u);  // DeepSeek + 5 Mixtral domains
  const json& ds = j["sources"][0];
  EXPECT_EQ(ds["layers"], 58);  // 61 layers, 3 dense
  EXPECT_EQ(ds["num_experts"], 256);
  EXPECT_GT(ds["imbalance_real_mean"].get<double>(), 3.0);
  EXPECT_GE(run_of(ds, 128, "drop")["dropped_fraction"][0].get<double>(), 0.5 - 1e-12);  // capacity 2 of 4 per expert
  EXPECT_EQ(run_of(ds, 128, "drop")["dropped_fraction"][1].get<double>(), 0.0);
  for (const json& s : j["sources"]) {
    const json& d = run_of(s, 128, "drop")["dropped_fraction"];
    const json& r = run_of(s, 128, "reroute")["dropped_fraction"];
    for (size_t i = 0; i < 2; ++i) EXPECT_LE(r[i].get<double>(), d[i].get<double>() + 1e-12) << s["name"];
  }
  ASSERT_EQ(j["groups"].size(), 2u);
  EXPECT_EQ(j["groups"][0]["name"], "DeepSeek-V3 prefill");
}

TEST(BenchMoeLayerCliTest, Help) {
  for (const char* cmd : {"bench moe-layer --help", "bench capacity --help"}) {
    CommandResult r = moe_cmd(cmd);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_CONTAINS(r.output, "--capacity-factor");
    EXPECT_CONTAINS(r.output, "--format");
  }
}

TEST(BenchMoeLayerCliTest, BadFlags) {
  expect_error_exit(moe_cmd("bench moe-layer --capacity-factor -1 --overflow drop"), {"--capacity-factor", "-1"});
  expect_error_exit(moe_cmd("bench moe-layer --router foo"), {"--router", "foo"});
  expect_error_exit(moe_cmd("bench moe-layer --tokens 1,0"), {"--tokens", "0"});
  expect_error_exit(moe_cmd("bench moe-layer --overflow bogus"), {"--overflow", "bogus"});
  expect_error_exit(moe_cmd("bench moe-layer --threads 0"), {"--threads"});
  expect_error_exit(moe_cmd("bench moe-layer --format xml"), {"--format", "xml"});
  expect_error_exit(moe_cmd("bench moe-layer --tokens abc"), {"--tokens"});
  if (std::getenv("OMPI_COMM_WORLD_SIZE") == nullptr) {
    expect_error_exit(moe_cmd("bench moe-layer --ep 2 --tokens 1"), {"--ep 2", "mpirun"});
  }
  expect_error_exit(moe_cmd("bench capacity --capacity-factor 0.5,-1"), {"--capacity-factor", "-1"});
  expect_error_exit(moe_cmd("bench capacity --overflow dropless"), {"--overflow", "dropless"});
  expect_error_exit(moe_cmd("bench capacity --batch 0"), {"--batch"});
}

TEST_F(BenchCapacityCliTest, BadFiles) {
  const std::string missing = dir_.file("missing.json");
  expect_error_exit(moe_cmd("bench capacity --routing-file " + sh_quote(missing)), {"--routing-file", missing});
  const std::string broken = write("broken.json", "{\"logical_count\": [[1, 2");
  expect_error_exit(moe_cmd("bench capacity --routing-file " + sh_quote(broken)), {"--routing-file", broken, "JSON"});
  const std::string other = write("other.json", "{\"x\": 1}");
  expect_error_exit(moe_cmd("bench capacity --routing-file " + sh_quote(other)), {other, "unrecognised format"});
  const std::string neg = write("neg.json", "{\"logical_count\": [[1,2,3,4,5,6,7,8,9], [1,-2,3,4,5,6,7,8,9]]}");
  expect_error_exit(moe_cmd("bench capacity --routing-file " + sh_quote(neg)), {neg, "logical_count[1]", "negative"});
  const std::string ragged = write("ragged.json", "{\"logical_count\": [[1,2,3,4,5,6,7,8,9], [1,2]]}");
  expect_error_exit(moe_cmd("bench capacity --routing-file " + sh_quote(ragged)), {ragged, "expected 9"});
  const std::string zero = write("zero.json", "{\"logical_count\": [[0,0,0,0,0,0,0,0]]}");
  expect_error_exit(moe_cmd("bench capacity --routing-file " + sh_quote(zero)), {zero, "zero"});
  // Without --routing-file the files come from --routing-dir: a folder without them names it.
  const std::string empty_dir = dir_.file("no_routing_here");
  expect_error_exit(moe_cmd("bench capacity --routing-dir " + sh_quote(empty_dir)),
                    {"--routing-dir", empty_dir, "olmoe_paper_expert_counts.json", "--routing-file"});
}

}  // namespace
}  // namespace moe
