#include "doctor_checks.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "moe/core/text_format.h"
#include "moe/model/config.h"
#include "moe/model/hf_checkpoint.h"
#include "moe/planner/cost_model.h"
#include "moe/planner/step_model.h"
#include "moe/store/store_layout.h"
#include "moe/store/store_maintenance.h"
#include "moe/store/store_model.h"

namespace moe::cli::doctor {
namespace {

std::string gb(double bytes) {
  return bytes < 1e9 ? format_fixed(bytes / 1e6, 1) + " MB" : format_fixed(bytes / 1e9, 2) + " GB";
}
std::string gbps(double bytes_per_s) { return format_fixed(bytes_per_s / 1e9, 2) + " GB/s"; }

// Runs `cmd` (stdout only); "" when it fails.
std::string command_output(const std::string& cmd, int* status) {
  std::string out;
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (pipe == nullptr) return out;
  std::array<char, 4096> buf{};
  size_t n = 0;
  while ((n = std::fread(buf.data(), 1, buf.size(), pipe)) > 0) out.append(buf.data(), n);
  *status = ::pclose(pipe);
  return out;
}

Check bandwidth_check(const std::string& name, planner::Primitive prim, int n, double bytes, double seconds,
                      const ProbeResult& probe, const planner::HardwareProfile* profile,
                      const std::string& profile_name) {
  Check c{name, Verdict::kPass, ""};
  const double measured = bytes / seconds;
  c.figure = gbps(measured) + " for " + format_g(bytes / 1048576.0) + " MiB" +
             (name == "alltoall_bandwidth" ? " per rank over " + std::to_string(n) + " ranks" : " one way");
  if (profile == nullptr) {
    c.figure += " (no --profile: not compared)";
    return c;
  }
  const planner::Tier tier = probe.same_node_01 ? planner::Tier::kIntraNode : planner::Tier::kInterNode;
  const double predicted = planner::tier_collective_seconds(profile->tier(tier)[prim], prim, n, bytes);
  const double ratio = predicted / seconds;  // 1 = as fast as the profile says
  c.figure += " vs " + gbps(bytes / predicted) + " predicted by " + profile_name + " (" + planner::tier_name(tier) +
              "): " + format_double("%.3g", ratio) + "x";
  c.verdict = ratio >= 0.7 ? Verdict::kPass : ratio >= 0.3 ? Verdict::kWarn : Verdict::kFail;
  return c;
}

}  // namespace

StatusOr<ModelConfig> load_any_model_config(const std::string& dir) {
  if (!is_store_dir(dir)) return load_model_config(dir);
  auto store = StoreModel::open(dir);
  if (!store.ok()) return store.status();
  return load_model_config(*store.value());
}

const char* verdict_name(Verdict v) {
  switch (v) {
    case Verdict::kPass: return "pass";
    case Verdict::kWarn: return "warn";
    case Verdict::kFail: return "fail";
    case Verdict::kSkip: return "skip";
  }
  return "?";
}

int exit_code(const std::vector<Check>& checks) {
  int code = 0;
  for (const Check& c : checks) {
    if (c.verdict == Verdict::kFail) code = 4;
    if (c.verdict == Verdict::kWarn && code == 0) code = 3;
  }
  return code;
}

std::string probe_json(const ProbeResult& p) {
  nlohmann::json j = {{"ranks", p.ranks},         {"hosts", p.hosts},           {"same_node_01", p.same_node_01},
                      {"p2p_bytes", p.p2p_bytes}, {"p2p_seconds", p.p2p_seconds}, {"a2a_bytes", p.a2a_bytes},
                      {"a2a_seconds", p.a2a_seconds}};
  return j.dump();
}

bool parse_probe_json(const std::string& text, ProbeResult* p) {
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    p->ranks = j.at("ranks").get<int>();
    p->hosts = j.at("hosts").get<std::vector<std::string>>();
    p->same_node_01 = j.at("same_node_01").get<bool>();
    p->p2p_bytes = j.at("p2p_bytes").get<double>();
    p->p2p_seconds = j.at("p2p_seconds").get<double>();
    p->a2a_bytes = j.at("a2a_bytes").get<double>();
    p->a2a_seconds = j.at("a2a_seconds").get<double>();
    return p->ranks >= 1;
  } catch (const nlohmann::json::exception&) {
    return false;
  }
}

Check p2p_check(const ProbeResult& probe, const planner::HardwareProfile* profile, const std::string& profile_name) {
  if (probe.ranks < 2 || probe.p2p_seconds <= 0) return {"p2p_bandwidth", Verdict::kSkip, "needs --np >= 2"};
  return bandwidth_check("p2p_bandwidth", planner::Primitive::kP2p, 2, probe.p2p_bytes, probe.p2p_seconds, probe,
                         profile, profile_name);
}

Check a2a_check(const ProbeResult& probe, const planner::HardwareProfile* profile, const std::string& profile_name) {
  if (probe.ranks < 2 || probe.a2a_seconds <= 0) return {"alltoall_bandwidth", Verdict::kSkip, "needs --np >= 2"};
  return bandwidth_check("alltoall_bandwidth", planner::Primitive::kAllToAll, probe.ranks, probe.a2a_bytes,
                         probe.a2a_seconds, probe, profile, profile_name);
}

Check memory_check(const MemoryInput& in) {
  Check c{"memory_per_rank", Verdict::kPass, ""};
  auto cfg = load_any_model_config(in.model_dir);
  if (!cfg.ok()) return {"memory_per_rank", Verdict::kFail, cfg.status().message()};
  const ModelConfig& m = cfg.value();
  const planner::ModelShape shape = planner::model_shape(m);
  planner::HardwareProfile hw;  // CPU: nothing reserved by a device runtime
  planner::Workload w;
  w.activation_bytes = 4;  // the CPU engine computes and caches in f32
  w.kv_bytes = 4;
  const int experts = static_cast<int>(shape.experts);
  const int ep = std::max(in.ep, 1);
  const int own = (experts + ep - 1) / ep;
  // Spare slots hold replicas of hot experts; with replica_cap copies of each expert at
  // most, the whole group holds at most experts * (cap - 1) replicas.
  const int spare = in.slots_per_rank > own ? in.slots_per_rank - own : 0;
  const int cap_share = (experts * (in.replica_cap - 1) + ep - 1) / ep;
  w.expert_replicas = std::min(spare, cap_share);
  planner::Strategy s;
  s.moe_ep = ep;
  const int64_t ctx = m.max_position_embeddings > 0 ? m.max_position_embeddings : 2048;
  const planner::MemoryUse u = planner::memory_use(shape, hw, w, s, in.seqs, ctx, 512);
  c.figure = "need " + gb(u.total()) + " per rank (weights " + gb(u.weights) + " incl. " + std::to_string(own) +
             " experts/layer, replicas " + gb(u.expert_replicas) + " (" + std::to_string(w.expert_replicas) +
             " slots/layer), KV " + gb(u.kv_cache) + " for " + std::to_string(in.seqs) + " x " + std::to_string(ctx) +
             " tokens, buffers " + gb(u.buffers) + ") vs " + gb(in.available_bytes) + " available";
  if (in.available_bytes <= 0) {
    c.verdict = Verdict::kSkip;
    c.figure += " (available memory unknown)";
    return c;
  }
  const double share = u.total() / in.available_bytes;
  c.figure += " (" + format_fixed(100 * share, 1) + "%)";
  c.verdict = share < 0.8 ? Verdict::kPass : share <= 1.0 ? Verdict::kWarn : Verdict::kFail;
  return c;
}

Check model_check(const std::string& dir, int threads) {
  if (is_store_dir(dir)) {
    auto report = verify_store(dir, 0, threads, nullptr);
    if (!report.ok()) return {"model_verify", Verdict::kFail, "store " + dir + ": " + report.status().message()};
    const VerifyReport& r = report.value();
    std::string figure = "store " + dir + " version " + std::to_string(r.version) + ": " +
                         std::to_string(r.shards_checked) + " shards, " + gb(static_cast<double>(r.raw_bytes)) +
                         " hashed";
    if (!r.bad.empty()) {
      return {"model_verify", Verdict::kFail,
              figure + "; " + std::to_string(r.bad.size()) + " bad, first: " + r.bad[0].description + " (" +
                  r.bad[0].problem + ")"};
    }
    return {"model_verify", Verdict::kPass, figure};
  }
  auto cfg = load_model_config(dir);
  if (!cfg.ok()) return {"model_verify", Verdict::kFail, cfg.status().message()};
  auto ckpt = HfCheckpoint::open(dir);
  if (!ckpt.ok()) return {"model_verify", Verdict::kFail, ckpt.status().message()};
  return {"model_verify", Verdict::kPass,
          "Hugging Face directory " + dir + ": config.json parsed, " + std::to_string(ckpt.value().shards().size()) +
              " safetensors file(s), " + std::to_string(ckpt.value().num_tensors()) + " tensors, " +
              gb(static_cast<double>(ckpt.value().total_bytes())) + " (no checksums in this format)"};
}

Check port_check(int port) {
  const std::string name = "port_" + std::to_string(port);
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return {name, Verdict::kFail, std::string("socket: ") + std::strerror(errno)};
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const int rc = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  const int err = errno;
  ::close(fd);
  if (rc != 0) return {name, Verdict::kFail, "TCP " + std::to_string(port) + ": " + std::strerror(err)};
  return {name, Verdict::kPass, "TCP " + std::to_string(port) + " free"};
}

std::vector<Check> accelerator_checks() {
  std::vector<Check> out;
  int status = -1;
  const std::string smi =
      command_output("nvidia-smi --query-gpu=name,memory.total,memory.used --format=csv,noheader 2>/dev/null", &status);
  const bool gpu = status == 0 && !smi.empty();
  if (gpu) {
    std::string first = smi.substr(0, smi.find('\n'));
    const long n = std::count(smi.begin(), smi.end(), '\n');
    out.push_back({"gpu", Verdict::kPass, std::to_string(n) + " GPU(s): " + first});
  } else {
    out.push_back({"gpu", Verdict::kSkip, "nvidia-smi not found or no GPU (this CPU engine does not need one)"});
  }
  const std::string nccl = command_output("ldconfig -p 2>/dev/null | grep -m1 libnccl.so", &status);
  if (!gpu) {
    out.push_back({"nccl", Verdict::kSkip, "no GPU"});
  } else if (nccl.empty()) {
    out.push_back({"nccl", Verdict::kWarn, "GPU present but libnccl.so not in the loader's cache"});
  } else {
    out.push_back({"nccl", Verdict::kPass, nccl.substr(0, nccl.find('\n'))});
  }
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!gpu) {
    out.push_back({"gpudirect_rdma", Verdict::kSkip, "no GPU"});
  } else if (fs::exists("/sys/module/nvidia_peermem", ec) || fs::exists("/sys/module/nv_peer_mem", ec)) {
    out.push_back({"gpudirect_rdma", Verdict::kPass, "nvidia_peermem loaded"});
  } else {
    out.push_back({"gpudirect_rdma", Verdict::kWarn, "GPU present but nvidia_peermem is not loaded"});
  }
  std::vector<std::string> ib;
  if (fs::is_directory("/sys/class/infiniband", ec)) {
    for (const auto& e : fs::directory_iterator("/sys/class/infiniband", ec)) ib.push_back(e.path().filename());
  }
  if (ib.empty()) {
    out.push_back({"infiniband", Verdict::kSkip, "no InfiniBand device (/sys/class/infiniband empty or absent)"});
  } else {
    std::string names;
    for (const std::string& d : ib) names += (names.empty() ? "" : ", ") + d;
    out.push_back({"infiniband", Verdict::kPass, names});
  }
  return out;
}

}  // namespace moe::cli::doctor
