// Hardware profile files: every tier and primitive is required, errors name the field;
// the shipped profiles load; JSON round-trips.
#include "moe/planner/hardware_profile.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "test_util.h"

namespace moe::planner {
namespace {

using json = nlohmann::json;

json valid() {
  json tier;
  for (const char* p : {"allreduce", "reduce_scatter", "allgather", "alltoall", "p2p"}) {
    tier[p] = {{"alpha", 1e-6}, {"beta", 1e-9}};
  }
  json inter = tier;
  inter["alltoall"] = {{"alpha", 2e-6}, {"bandwidth", 50e9}};
  return {{"name", "test"},
          {"devices_per_node", 8},
          {"device", {{"peak_flops", {{"bf16", 1e15}, {"fp8", 2e15}}}, {"memory_bandwidth", 3e12},
                      {"memory_capacity", 80e9}, {"memory_efficiency", 0.8}}},
          {"tiers", {{"intra_node", tier}, {"inter_node", inter}}}};
}

std::string error_of(const json& j) {
  auto p = parse_hardware_profile(j.dump(), "p.json");
  EXPECT_FALSE(p.ok());
  return p.ok() ? "" : p.status().message();
}

TEST(HardwareProfileTest, ParsesValidProfile) {
  auto p = parse_hardware_profile(valid().dump(), "p.json");
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(p->devices_per_node, 8);
  EXPECT_DOUBLE_EQ(p->device.peak_flops_fp8, 2e15);
  EXPECT_DOUBLE_EQ(p->device.memory_efficiency, 0.8);
  EXPECT_DOUBLE_EQ(p->device.compute_efficiency, 1.0);
  EXPECT_DOUBLE_EQ(p->intra_node[Primitive::kAllReduce].alpha, 1e-6);
  EXPECT_DOUBLE_EQ(p->inter_node[Primitive::kAllToAll].beta, 1.0 / 50e9);  // from bandwidth
  // Round trip.
  auto q = parse_hardware_profile(hardware_profile_json(*p), "q.json");
  ASSERT_TRUE(q.ok()) << q.status().to_string();
  EXPECT_DOUBLE_EQ(q->inter_node[Primitive::kAllToAll].beta, p->inter_node[Primitive::kAllToAll].beta);
  EXPECT_DOUBLE_EQ(q->device.memory_capacity, 80e9);
}

TEST(HardwareProfileTest, MissingTierNamesIt) {
  json j = valid();
  j["tiers"].erase("inter_node");
  EXPECT_EQ(error_of(j), "p.json: tiers.inter_node: missing (every profile needs intra_node and inter_node)");
  j = valid();
  j.erase("tiers");
  EXPECT_NE(error_of(j).find("p.json: tiers: missing"), std::string::npos);
}

TEST(HardwareProfileTest, MissingPrimitiveNamesIt) {
  for (const char* p : {"allreduce", "reduce_scatter", "allgather", "alltoall", "p2p"}) {
    json j = valid();
    j["tiers"]["intra_node"].erase(p);
    EXPECT_EQ(error_of(j), std::string("p.json: tiers.intra_node.") + p + ": missing");
  }
}

TEST(HardwareProfileTest, BadNumbersNameTheField) {
  json j = valid();
  j["tiers"]["inter_node"]["p2p"]["beta"] = -1;
  EXPECT_NE(error_of(j).find("tiers.inter_node.p2p.beta: must be > 0"), std::string::npos);
  j = valid();
  j["tiers"]["inter_node"]["p2p"] = {{"alpha", 1e-6}};
  EXPECT_NE(error_of(j).find("tiers.inter_node.p2p: needs beta"), std::string::npos);
  j = valid();
  j["tiers"]["intra_node"]["allgather"]["alpha"] = "fast";
  EXPECT_NE(error_of(j).find("tiers.intra_node.allgather.alpha: must be a number"), std::string::npos);
  j = valid();
  j["device"].erase("memory_bandwidth");
  EXPECT_EQ(error_of(j), "p.json: device.memory_bandwidth: missing");
  j = valid();
  j["device"]["peak_flops"].erase("bf16");
  EXPECT_EQ(error_of(j), "p.json: device.peak_flops.bf16: missing");
  j = valid();
  j["device"]["compute_efficiency"] = 1.5;
  EXPECT_NE(error_of(j).find("device.compute_efficiency: must be in (0, 1]"), std::string::npos);
  j = valid();
  j["devices_per_node"] = 0;
  EXPECT_NE(error_of(j).find("devices_per_node: must be an integer >= 1"), std::string::npos);
  j = valid();
  j.erase("devices_per_node");
  EXPECT_EQ(error_of(j), "p.json: devices_per_node: missing");
  EXPECT_NE(parse_hardware_profile("{not json", "p.json").status().message().find("p.json: not valid JSON"),
            std::string::npos);
}

TEST(HardwareProfileTest, SharedCoresFieldsRoundTripAndErrorsNameThem) {
  json j = valid();
  j["device"]["shared_ranks"] = 4;
  j["device"]["solo_speedup"] = {{"compute", 1.8}, {"memory", 1.5}};
  auto p = parse_hardware_profile(j.dump(), "p.json");
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->device.shared_ranks, 4);
  EXPECT_DOUBLE_EQ(p->device.solo_compute_speedup, 1.8);
  EXPECT_DOUBLE_EQ(p->device.solo_memory_speedup, 1.5);
  auto back = parse_hardware_profile(hardware_profile_json(*p), "back.json");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->device.shared_ranks, 4);
  EXPECT_DOUBLE_EQ(back->device.solo_memory_speedup, 1.5);
  auto plain = parse_hardware_profile(valid().dump(), "p.json");  // absent: dedicated devices
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->device.shared_ranks, 1);
  EXPECT_DOUBLE_EQ(plain->device.solo_compute_speedup, 1.0);
  j["device"]["shared_ranks"] = 0;
  EXPECT_NE(error_of(j).find("device.shared_ranks: must be an integer >= 1"), std::string::npos);
  j["device"]["shared_ranks"] = 2;
  j["device"]["solo_speedup"]["memory"] = 0.5;
  EXPECT_EQ(error_of(j), "p.json: device.solo_speedup.memory: must be >= 1");
  j["device"]["solo_speedup"] = 2;
  EXPECT_NE(error_of(j).find("device.solo_speedup: must be an object"), std::string::npos);
}

TEST(HardwareProfileTest, MissingFileIsNotFound) {
  auto p = load_hardware_profile("/nonexistent/profile.json");
  EXPECT_EQ(p.status().code(), StatusCode::kNotFound);
  EXPECT_NE(p.status().message().find("/nonexistent/profile.json"), std::string::npos);
}

TEST(HardwareProfileTest, ShippedProfilesLoad) {
  for (const char* name : {"h100_sxm_8gpu", "h200_sxm_8gpu", "a100_sxm_8gpu"}) {
    auto p = load_hardware_profile(testing::source_dir() + "/profiles/" + name + ".json");
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    EXPECT_EQ(p->devices_per_node, 8);
    // NVLink is faster than the NIC for every primitive.
    for (size_t i = 0; i < p->intra_node.primitive.size(); ++i) {
      EXPECT_LT(p->intra_node.primitive[i].beta, p->inter_node.primitive[i].beta) << name << " primitive " << i;
    }
  }
}

}  // namespace
}  // namespace moe::planner
