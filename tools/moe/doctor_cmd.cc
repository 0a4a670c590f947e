// moe doctor: the design seed's pre-flight checklist done for real. Each check prints
// pass, warn, fail or skip with the figure it judged; the exit status is the worst
// result (doctor_checks.h: 0 pass, 3 warn, 4 fail).
//   moe doctor [--hosts a,b] [--np N] [--model DIR] [--config F] [--port N] [--profile P]
// The MPI launch runs `mpirun -np N [--host ...] moe doctor --probe` (under `timeout`),
// whose rank 0 reports the ranks' hosts and the p2p and all-to-all bandwidth it measured
// with the engine's Communicator.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "doctor_checks.h"
#include "moe/comm/mpi_communicator.h"
#include "moe/config/config_file.h"
#include "moe/core/atomic_file.h"
#include "moe/core/text_format.h"

namespace moe::cli {
namespace {

using doctor::Check;
using doctor::Verdict;

struct DoctorFlags {
  std::string hosts;  // comma-separated, passed to mpirun --host
  int np = 2;
  std::string model;
  std::string config;
  std::vector<int> ports;
  std::string profile;
  std::string mpirun = "mpirun";
  std::vector<std::string> mpirun_args;
  double timeout = 60;
  int64_t probe_bytes = 4 << 20;
  bool json = false;
  bool probe = false;  // internal: the ranks' side under mpirun
  std::string probe_out;
};

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Under mpirun: hosts, then p2p (ranks 0 <-> 1 ping-pong) and all-to-all timings.
int run_probe(const DoctorFlags& f) {
  if (!launched_under_mpi()) return fail("--probe is internal: moe doctor runs it under mpirun");
  MpiOptions mo;
  mo.timeout_seconds = f.timeout;
  auto world_or = make_mpi_communicator(mo);
  if (!world_or.ok()) return fail(world_or.status().message());
  Communicator& c = **world_or;
  const int n = c.size();
  std::array<char, 64> host{};
  ::gethostname(host.data(), host.size() - 1);
  std::vector<char> hosts(64 * static_cast<size_t>(n));
  if (Status st = c.allgather(host.data(), 64, hosts.data()); !st.ok()) return fail(st.message());
  doctor::ProbeResult r;
  r.ranks = n;
  for (int i = 0; i < n; ++i) r.hosts.emplace_back(hosts.data() + 64 * i);
  const size_t bytes = static_cast<size_t>(f.probe_bytes) / (4 * static_cast<size_t>(n)) * 4 * static_cast<size_t>(n);
  std::vector<float> a(bytes / 4, 1.0f), b(bytes / 4, 0.0f);
  const int iters = 8;
  if (n >= 2) {
    r.same_node_01 = c.node_of(0) == c.node_of(1);
    double t0 = 0;
    for (int i = -1; i < iters; ++i) {  // i = -1: warm-up
      if (i == 0) t0 = now_s();
      Status st;
      if (c.rank() == 0) {
        st = c.send(a.data(), bytes, 1, 7);
        if (st.ok()) st = c.recv(b.data(), bytes, 1, 8);
      } else if (c.rank() == 1) {
        st = c.recv(b.data(), bytes, 0, 7);
        if (st.ok()) st = c.send(a.data(), bytes, 0, 8);
      }
      if (!st.ok()) return fail("p2p: " + st.message());
    }
    r.p2p_bytes = static_cast<double>(bytes);
    r.p2p_seconds = (now_s() - t0) / (2.0 * iters);
    std::vector<size_t> blocks(static_cast<size_t>(n), bytes / static_cast<size_t>(n));
    if (Status st = c.barrier(); !st.ok()) return fail(st.message());
    for (int i = -1; i < iters; ++i) {
      if (i == 0) t0 = now_s();
      if (Status st = c.alltoallv(a.data(), blocks, b.data(), blocks); !st.ok()) return fail("alltoall: " + st.message());
    }
    double mine = (now_s() - t0) / iters;
    std::vector<double> all(static_cast<size_t>(n));
    if (Status st = c.allgather(&mine, sizeof mine, all.data()); !st.ok()) return fail(st.message());
    r.a2a_bytes = static_cast<double>(bytes);
    r.a2a_seconds = *std::max_element(all.begin(), all.end());
  }
  if (c.rank() == 0) {
    if (Status st = write_file_atomically(f.probe_out, doctor::probe_json(r)); !st.ok()) return fail(st.message());
  }
  return 0;
}

std::string self_exe() {
  char exe[PATH_MAX] = {0};
  const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  return n > 0 ? std::string(exe, static_cast<size_t>(n)) : "moe";
}

std::string quote(const std::string& s) {
  std::string out = "'";
  for (char ch : s) out += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return out + "'";
}

double mem_available_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  double kb = 0;
  std::string unit;
  while (in >> key >> kb >> unit) {
    if (key == "MemAvailable:") return kb * 1024;
  }
  return 0;
}

// The MPI launch: mpirun the probe, read its report.
Check mpi_launch(const DoctorFlags& f, doctor::ProbeResult* probe) {
  char tmpl[] = "/tmp/moe_doctor_XXXXXX";
  const char* dir = ::mkdtemp(tmpl);
  if (dir == nullptr) return {"mpi_launch", Verdict::kFail, "cannot create a temporary directory"};
  const std::string out = std::string(dir) + "/probe.json", log = std::string(dir) + "/probe.log";
  std::string cmd = "timeout " + std::to_string(static_cast<int>(f.timeout) + 5) + " " + quote(f.mpirun) + " -np " +
                    std::to_string(f.np);
  if (!f.hosts.empty()) cmd += " --host " + quote(f.hosts);
  for (const std::string& a : f.mpirun_args) cmd += " " + quote(a);
  cmd += " " + quote(self_exe()) + " doctor --probe --probe-out " + quote(out) + " --probe-bytes " +
         std::to_string(f.probe_bytes) + " --timeout " + std::to_string(f.timeout) + " > " + quote(log) + " 2>&1";
  const double t0 = now_s();
  const int status = std::system(cmd.c_str());
  const double took = now_s() - t0;
  const int rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream in(out);
  std::stringstream ss;
  ss << in.rdbuf();
  // The reason: the first line inside Open MPI's help box (between lines of dashes) when
  // there is one, else the last non-empty line of the log.
  std::ifstream lin(log);
  std::string last, boxed, line;
  bool in_box = false;
  while (std::getline(lin, line)) {
    if (line.empty()) continue;
    if (line.size() >= 10 && line.find_first_not_of('-') == std::string::npos) {
      in_box = !in_box;
      continue;
    }
    if (in_box && boxed.empty()) boxed = line;
    last = line;
  }
  if (!boxed.empty()) last = boxed;
  if (last.find("run as root") != std::string::npos) {
    last += " (add --mpirun-arg=--allow-run-as-root, or set OMPI_ALLOW_RUN_AS_ROOT=1 and OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1)";
  }
  std::filesystem::remove_all(dir);
  if (rc == 124) return {"mpi_launch", Verdict::kFail, "no answer within " + format_g(f.timeout + 5) + " s: " + cmd};
  if (rc == 127) return {"mpi_launch", Verdict::kFail, f.mpirun + " not found"};
  if (rc != 0 || !doctor::parse_probe_json(ss.str(), probe)) {
    return {"mpi_launch", Verdict::kFail, "mpirun exited " + std::to_string(rc) + (last.empty() ? "" : ": " + last)};
  }
  std::set<std::string> distinct(probe->hosts.begin(), probe->hosts.end());
  std::string hosts;
  for (const std::string& h : distinct) hosts += (hosts.empty() ? "" : ",") + h;
  return {"mpi_launch", Verdict::kPass,
          std::to_string(probe->ranks) + " ranks on " + std::to_string(distinct.size()) + " host(s) (" + hosts +
              ") started and answered in " + format_fixed(took, 2) + " s"};
}

// The value of `key` in the config file as an int, else `fallback`.
int config_int(const config::ConfigFile* file, std::string_view key, int fallback) {
  const config::ConfigValue* v = file ? file->find(key) : nullptr;
  return v ? std::stoi(v->text) : fallback;
}

int run_doctor(const DoctorFlags& f) {
  if (f.probe) return run_probe(f);
  if (f.np < 1) return fail("--np must be >= 1 (got " + std::to_string(f.np) + ")");
  if (!(f.timeout > 0)) return fail("--timeout must be > 0 seconds");
  if (f.probe_bytes < 4096) return fail("--probe-bytes must be >= 4096");
  std::unique_ptr<config::ConfigFile> file;
  if (!f.config.empty()) {
    auto loaded = config::load_config_file(f.config);
    if (!loaded.ok()) return fail(loaded.status().message());
    file = std::make_unique<config::ConfigFile>(std::move(loaded.value()));
  }
  std::unique_ptr<planner::HardwareProfile> profile;
  if (!f.profile.empty()) {
    auto p = planner::load_hardware_profile(f.profile);
    if (!p.ok()) return fail(p.status().message());
    profile = std::make_unique<planner::HardwareProfile>(std::move(p.value()));
  }
  std::string model = f.model;
  for (const char* key : {"model.path", "store.path"}) {
    if (model.empty() && file && file->find(key)) model = file->find(key)->text;
  }
  if (model.empty()) model = default_model_dir();
  std::vector<int> ports = f.ports;
  if (ports.empty()) ports.push_back(config_int(file.get(), "serving.port", 8000));

  std::vector<Check> checks;
  auto report = [&](const Check& c) {
    checks.push_back(c);
    if (!f.json) std::printf("[%s] %-20s %s\n", doctor::verdict_name(c.verdict), c.name.c_str(), c.figure.c_str());
    std::fflush(stdout);
  };
  if (file) {
    for (const config::ConfigWarning& w : file->warnings) {
      report({"config", Verdict::kWarn, f.config + ":" + std::to_string(w.line) + ": " + w.key + ": " + w.message});
    }
    if (file->warnings.empty()) report({"config", Verdict::kPass, f.config + ": every key honoured"});
  } else {
    report({"config", Verdict::kSkip, "no --config"});
  }
  doctor::ProbeResult probe;
  const Check launch = mpi_launch(f, &probe);
  report(launch);
  if (launch.verdict == Verdict::kPass) {
    const std::string name = f.profile.empty() ? "" : profile->name;
    report(doctor::p2p_check(probe, profile.get(), name));
    report(doctor::a2a_check(probe, profile.get(), name));
  } else {
    report({"p2p_bandwidth", Verdict::kSkip, "the MPI launch failed"});
    report({"alltoall_bandwidth", Verdict::kSkip, "the MPI launch failed"});
  }
  std::set<std::string> hosts(probe.hosts.begin(), probe.hosts.end());
  const int ranks_here = (f.np + std::max<int>(1, static_cast<int>(hosts.size())) - 1) /
                         std::max<int>(1, static_cast<int>(hosts.size()));
  doctor::MemoryInput mem;
  mem.model_dir = model;
  mem.ep = config_int(file.get(), "parallelism.ep", f.np);
  mem.slots_per_rank = config_int(file.get(), "expert_placement.slots_per_rank", 0);
  mem.replica_cap = config_int(file.get(), "expert_placement.replication_cap", 4);
  mem.seqs = config_int(file.get(), "serving.max_num_seqs", 32);
  mem.available_bytes = mem_available_bytes() / ranks_here;
  Check m = doctor::memory_check(mem);
  m.figure += " (" + std::to_string(ranks_here) + " rank(s) on this host share MemAvailable)";
  report(m);
  report(doctor::model_check(model, static_cast<int>(std::max(1u, std::thread::hardware_concurrency()))));
  for (int p : ports) report(doctor::port_check(p));
  for (const Check& c : doctor::accelerator_checks()) report(c);
  const int code = doctor::exit_code(checks);
  if (f.json) {
    nlohmann::json out = {{"checks", nlohmann::json::array()}, {"exit_code", code}};
    for (const Check& c : checks) {
      out["checks"].push_back({{"name", c.name}, {"result", doctor::verdict_name(c.verdict)}, {"figure", c.figure}});
    }
    std::printf("%s\n", out.dump(2).c_str());
  } else {
    std::printf("doctor: %s\n", code == 0 ? "all checks passed or skipped" : code == 3 ? "warnings" : "FAILED");
  }
  return code;
}

}  // namespace

RunFn add_doctor_command(CLI::App& app) {
  auto f = std::make_shared<DoctorFlags>();
  app.add_option("--hosts", f->hosts, "Hosts to launch on (mpirun --host, e.g. a:4,b:4); default: this machine");
  app.add_option("--np", f->np, "Ranks to launch for the MPI and bandwidth checks")->capture_default_str();
  app.add_option("--model", f->model, "Model directory or checkpoint store to verify and size (default: --config's "
                                      "model.path / store.path, else the shipped model)");
  app.add_option("--config", f->config, "YAML config: its warnings, parallelism.ep, expert_placement.replication_cap / "
                                        "slots_per_rank, serving.max_num_seqs and serving.port are used");
  app.add_option("--port", f->ports, "TCP port(s) that must be free (default: serving.port, else 8000)");
  app.add_option("--profile", f->profile, "Hardware profile (profiles/*.json, moe plan calibrate) to compare the "
                                          "measured bandwidth with");
  app.add_option("--mpirun", f->mpirun, "The mpirun to launch with")->capture_default_str();
  app.add_option("--mpirun-arg", f->mpirun_args, "Extra mpirun argument (repeatable), e.g. --mpirun-arg=--oversubscribe")
      ->allow_extra_args(false);
  app.add_option("--timeout", f->timeout, "Seconds the launch and each exchange may take")->capture_default_str();
  app.add_option("--probe-bytes", f->probe_bytes, "Bytes per p2p message and per rank's all-to-all")->capture_default_str();
  app.add_flag("--json", f->json, "One JSON object instead of lines");
  app.add_flag("--probe", f->probe, "Internal: the ranks' side, run under mpirun")->group("");
  app.add_option("--probe-out", f->probe_out, "Internal: where rank 0 writes the probe's report")->group("");
  app.footer("Exit status: 0 every check passed or was skipped, 3 the worst was a warning, 4 a check failed "
             "(1: doctor itself failed, 2: bad usage).");
  return [f] { return run_doctor(*f); };
}

}  // namespace moe::cli
