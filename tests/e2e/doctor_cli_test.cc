// `moe doctor` end to end: the MPI launch and bandwidth probe under mpirun (2 ranks), the
// memory, model-store and port checks, skipped checks named with their reason, and the
// exit status = the worst result (0 pass, 3 warn, 4 fail).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "contains_util.h"
#include "test_util.h"

namespace moe::testing {
namespace {

struct Doctor {
  int exit_code = -1;
  std::string output;
  std::map<std::string, nlohmann::json> checks;  // name -> {result, figure}
};

Doctor doctor(const std::string& args) {
  // --allow-run-as-root: CI runs as root without Open MPI's two environment variables.
  const CommandResult r = run_command(moe_binary() +
                                      " doctor --json --mpirun-arg=--allow-run-as-root --mpirun-arg=--oversubscribe " + args);
  Doctor d{r.exit_code, r.output, {}};
  const size_t brace = r.output.find("{\n");
  if (brace == std::string::npos) return d;
  const nlohmann::json j = nlohmann::json::parse(r.output.substr(brace), nullptr, false);
  if (j.is_discarded()) return d;
  for (const auto& c : j["checks"]) d.checks[c["name"]] = c;
  EXPECT_EQ(j["exit_code"], r.exit_code);
  return d;
}

// A socket listening on a free port (closed by the destructor).
struct Listener {
  int fd = -1, port = 0;
  Listener() {
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    ::listen(fd, 1);
    socklen_t len = sizeof a;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
  }
  ~Listener() { ::close(fd); }
};

TEST(DoctorCli, AllChecksOnThisMachine) {
  int free_port = 0;
  {
    Listener l;  // a port that was free a moment ago
    free_port = l.port;
  }
  const Doctor d = doctor("--np 2 --model " + tiny_model_dir() + " --port " + std::to_string(free_port));
  ASSERT_FALSE(d.checks.empty()) << d.output;
  EXPECT_EQ(d.checks.at("mpi_launch")["result"], "pass") << d.output;
  EXPECT_CONTAINS(d.checks.at("mpi_launch")["figure"].get<std::string>(), "2 ranks on 1 host(s)");
  EXPECT_EQ(d.checks.at("p2p_bandwidth")["result"], "pass") << d.output;
  EXPECT_CONTAINS(d.checks.at("p2p_bandwidth")["figure"].get<std::string>(), "no --profile: not compared");
  EXPECT_EQ(d.checks.at("alltoall_bandwidth")["result"], "pass") << d.output;
  EXPECT_EQ(d.checks.at("memory_per_rank")["result"], "pass") << d.output;
  EXPECT_CONTAINS(d.checks.at("memory_per_rank")["figure"].get<std::string>(), "2 rank(s) on this host");
  EXPECT_EQ(d.checks.at("model_verify")["result"], "pass") << d.output;
  EXPECT_EQ(d.checks.at("port_" + std::to_string(free_port))["result"], "pass") << d.output;
  EXPECT_EQ(d.checks.at("config")["result"], "skip");
  // No GPU here: skipped with the reason (a machine with one runs them).
  if (d.checks.at("gpu")["result"] == "skip") {
    EXPECT_CONTAINS(d.checks.at("gpu")["figure"].get<std::string>(), "nvidia-smi");
    EXPECT_EQ(d.checks.at("nccl")["result"], "skip");
    EXPECT_EQ(d.checks.at("gpudirect_rdma")["figure"], "no GPU");
  }
  EXPECT_TRUE(d.exit_code == 0 || d.exit_code == 3) << d.output;  // 3 only if an accelerator check warned
}

TEST(DoctorCli, PortInUseAndFailedLaunchFail) {
  Listener busy;
  const Doctor d = doctor("--np 2 --mpirun /nonexistent/mpirun --model " + tiny_model_dir() + " --port " +
                          std::to_string(busy.port));
  EXPECT_EQ(d.exit_code, 4) << d.output;
  EXPECT_EQ(d.checks.at("mpi_launch")["result"], "fail");
  EXPECT_CONTAINS(d.checks.at("mpi_launch")["figure"].get<std::string>(), "/nonexistent/mpirun not found");
  EXPECT_EQ(d.checks.at("p2p_bandwidth")["result"], "skip");
  EXPECT_EQ(d.checks.at("p2p_bandwidth")["figure"], "the MPI launch failed");
  EXPECT_EQ(d.checks.at("port_" + std::to_string(busy.port))["result"], "fail");
  EXPECT_CONTAINS(d.checks.at("port_" + std::to_string(busy.port))["figure"].get<std::string>(), "in use");
}

TEST(DoctorCli, FailedLaunchNamesTheReasonInsideOpenMpisHelpBox) {
  // A stand-in mpirun printing Open MPI's refusal to run as root (its real text, boxed by
  // dashes) and exiting 1: the check names the reason line and the two ways round it, not
  // the closing line of dashes.
  const std::string dir = make_temp_dir("doctor_box");
  const std::string dashes(74, '-');
  write_file(dir + "/mpirun", "#!/bin/sh\necho " + dashes + "\necho 'mpirun has detected an attempt to run as root.'\n" +
                                  "echo\necho 'Running as root is *strongly* discouraged'\necho " + dashes + "\nexit 1\n");
  std::filesystem::permissions(dir + "/mpirun", std::filesystem::perms::owner_all);
  const Doctor d = doctor("--np 2 --mpirun " + dir + "/mpirun --model " + tiny_model_dir() + " --port 0");
  EXPECT_EQ(d.checks.at("mpi_launch")["result"], "fail") << d.output;
  const std::string fig = d.checks.at("mpi_launch")["figure"];
  EXPECT_EQ(fig,
            "mpirun exited 1: mpirun has detected an attempt to run as root. (add --mpirun-arg=--allow-run-as-root, or "
            "set OMPI_ALLOW_RUN_AS_ROOT=1 and OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1)");
  EXPECT_EQ(d.exit_code, 4);
}

TEST(DoctorCli, ProfileComparisonConfigWarningsAndStoreVerify) {
  const std::string dir = make_temp_dir("doctor");
  const std::string store = dir + "/store";
  ASSERT_EQ(run_command(moe_binary() + " ckpt convert --quiet --from " + tiny_model_dir() + " --store " + store).exit_code,
            0);
  write_file(dir + "/c.yaml", "store:\n  path: " + store + "\nalltoall:\n  use_cuda_aware: true\n");
  // An H100 NVLink profile: this machine's shared memory is far from it (warn or fail,
  // consistently with the printed ratio).
  const Doctor d = doctor("--np 2 --config " + dir + "/c.yaml --profile " + source_dir() +
                          "/profiles/h100_sxm_8gpu.json --mpirun /nonexistent/mpirun --port 0");
  EXPECT_EQ(d.checks.at("config")["result"], "warn") << d.output;
  EXPECT_CONTAINS(d.checks.at("config")["figure"].get<std::string>(), "c.yaml:4: alltoall.use_cuda_aware");
  EXPECT_EQ(d.checks.at("model_verify")["result"], "pass") << d.output;
  EXPECT_CONTAINS(d.checks.at("model_verify")["figure"].get<std::string>(), "store " + store + " version 1");
  EXPECT_EQ(d.checks.at("memory_per_rank")["result"], "pass") << d.output;  // sized from the store's config.json
  // Corrupt every shard byte of one file: verify fails, naming it.
  for (const auto& e : std::filesystem::recursive_directory_iterator(store + "/shards")) {
    if (e.is_regular_file()) {
      std::string bytes = read_file(e.path());
      bytes[bytes.size() / 2] ^= 0x55;
      write_file(e.path(), bytes);
      break;
    }
  }
  const Doctor bad = doctor("--np 2 --config " + dir + "/c.yaml --mpirun /nonexistent/mpirun --port 0");
  EXPECT_EQ(bad.checks.at("model_verify")["result"], "fail") << bad.output;
  EXPECT_CONTAINS(bad.checks.at("model_verify")["figure"].get<std::string>(), "1 bad");
  EXPECT_EQ(bad.exit_code, 4);
  // The bandwidth against the profile (a real launch).
  const Doctor p = doctor("--np 2 --model " + tiny_model_dir() + " --profile " + source_dir() +
                          "/profiles/h100_sxm_8gpu.json --port 0");
  ASSERT_EQ(p.checks.at("mpi_launch")["result"], "pass") << p.output;
  const std::string fig = p.checks.at("p2p_bandwidth")["figure"];
  EXPECT_CONTAINS(fig, "predicted by");
  const double ratio = std::stod(fig.substr(fig.rfind(": ") + 2));
  const std::string expected = ratio >= 0.7 ? "pass" : ratio >= 0.3 ? "warn" : "fail";
  EXPECT_EQ(p.checks.at("p2p_bandwidth")["result"], expected) << fig;
}

TEST(DoctorCli, MemoryCountsReplicaSlotsUpToTheCap) {
  // The shipped model: 8 experts per MoE layer. EP 2: 4 own experts per rank; 6 slots per
  // rank leave 2 spare; replication_cap 2 allows 8 x (2 - 1) / 2 = 4 replicas per rank, so
  // 2 are held; cap 1 allows none. (The seed multiplied every expert by the cap.)
  const std::string dir = make_temp_dir("doctor_mem");
  const std::string base = "model:\n  path: " + tiny_model_dir() + "\nparallelism:\n  ep: 2\n";
  write_file(dir + "/cap2.yaml", base + "expert_placement:\n  slots_per_rank: 6\n  replication_cap: 2\n");
  write_file(dir + "/cap1.yaml", base + "expert_placement:\n  slots_per_rank: 6\n  replication_cap: 1\n");
  const Doctor two = doctor("--config " + dir + "/cap2.yaml --mpirun /nonexistent/mpirun --port 0");
  const Doctor one = doctor("--config " + dir + "/cap1.yaml --mpirun /nonexistent/mpirun --port 0");
  EXPECT_CONTAINS(two.checks.at("memory_per_rank")["figure"].get<std::string>(), "incl. 4 experts/layer");
  EXPECT_CONTAINS(two.checks.at("memory_per_rank")["figure"].get<std::string>(), "(2 slots/layer)");
  EXPECT_CONTAINS(one.checks.at("memory_per_rank")["figure"].get<std::string>(), "(0 slots/layer)");
}

TEST(DoctorCli, BadUsage) {
  const CommandResult r = run_command(moe_binary() + " doctor --np 0");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_CONTAINS(r.output, "--np must be >= 1");
  const CommandResult p = run_command(moe_binary() + " doctor --profile /nonexistent.json");
  EXPECT_EQ(p.exit_code, 1);
  EXPECT_CONTAINS(p.output, "/nonexistent.json");
}

}  // namespace
}  // namespace moe::testing
