#include "moe/supervisor/worker_group.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include <httplib.h>

#include "moe/core/logging.h"
#include "moe/supervisor/worker_protocol.h"

extern char** environ;

namespace moe::supervisor {
namespace {

using Clock = std::chrono::steady_clock;

std::string describe_wait_status(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "killed by signal " + std::to_string(WTERMSIG(status));
  return "ended (wait status " + std::to_string(status) + ")";
}

// One spawned group: the child (mpirun or the worker), its output reader, its ranks.
class ProcessGroup final : public WorkerHandle {
 public:
  ProcessGroup(pid_t pid, int out_fd, int generation, std::string dir, const WorkerGroupOptions& options)
      : pid_(pid), out_fd_(out_fd), generation_(generation), dir_(std::move(dir)), options_(options) {
    reader_ = std::thread([this] { read_output(); });
  }
  ~ProcessGroup() override {
    kill();
    quit_reader_ = true;
    if (reader_.joinable()) reader_.join();
    ::close(out_fd_);
  }

  int port() const override { return port_; }
  void set_port(int port) { port_ = port; }

  std::vector<int64_t> pids() const override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!pids_complete_) {
      pids_ = read_rank_pids(dir_, options_.num_ranks);
      pids_complete_ = true;
      for (int64_t p : pids_) pids_complete_ &= p > 0;
    }
    return pids_;
  }

  std::string exit_reason() override {
    bool just_reaped = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (exit_reason_.empty() && !reaped_) {
        int status = 0;
        if (::waitpid(pid_, &status, WNOHANG) == pid_) {
          reaped_ = just_reaped = true;
          exit_reason_ = describe_wait_status(status);
        }
      }
      if (exit_reason_.empty()) return "";
    }
    // Its last words may still be in the pipe: let the reader get them (bounded).
    for (int i = 0; just_reaped && i < 100 && !reader_eof_; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::lock_guard<std::mutex> lock(mu_);
    return exit_reason_ + last_output_locked();
  }

  void kill() override {
    const std::vector<int64_t> ranks = pids();
    std::lock_guard<std::mutex> lock(mu_);
    if (killed_) return;
    killed_ = true;
    ::kill(-pid_, SIGKILL);  // its process group: mpirun and the ranks it forked
    for (int64_t p : ranks) {
      if (p > 0) ::kill(static_cast<pid_t>(p), SIGKILL);  // a rank in another group
    }
    if (reaped_) return;
    const auto deadline = Clock::now() + std::chrono::duration<double>(options_.reap_timeout_seconds);
    int status = 0;
    while (Clock::now() < deadline) {
      const pid_t r = ::waitpid(pid_, &status, WNOHANG);
      if (r == pid_ || r < 0) {
        reaped_ = true;
        if (exit_reason_.empty() && r == pid_) exit_reason_ = describe_wait_status(status);
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    MOE_LOG_ERROR("supervisor: worker group {} (pid {}) did not exit within {} s of SIGKILL", generation_, pid_,
                  options_.reap_timeout_seconds);
  }

 private:
  std::string last_output_locked() const {
    if (last_lines_.empty()) return "";
    std::string s = "; its last output:";
    for (const std::string& l : last_lines_) s += "\n  " + l;
    return s;
  }

  // Copies the group's output to stderr, prefixed, and keeps the last lines.
  void read_output() {
    const std::string prefix = "[worker " + std::to_string(generation_) + "] ";
    std::string buf;
    char chunk[4096];
    while (!quit_reader_) {
      pollfd p{out_fd_, POLLIN, 0};
      const int r = ::poll(&p, 1, 100);
      if (r <= 0) continue;
      const ssize_t n = ::read(out_fd_, chunk, sizeof(chunk));
      if (n <= 0) break;
      buf.append(chunk, static_cast<size_t>(n));
      size_t nl;
      while ((nl = buf.find('\n')) != std::string::npos) {
        emit(prefix, buf.substr(0, nl));
        buf.erase(0, nl + 1);
      }
    }
    if (!buf.empty()) emit(prefix, buf);
    reader_eof_ = true;
  }
  void emit(const std::string& prefix, const std::string& line) {
    std::fprintf(stderr, "%s%s\n", prefix.c_str(), line.c_str());
    std::fflush(stderr);
    std::lock_guard<std::mutex> lock(mu_);
    last_lines_.push_back(line);
    if (last_lines_.size() > 8) last_lines_.pop_front();
  }

  const pid_t pid_;
  const int out_fd_;
  const int generation_;
  const std::string dir_;
  const WorkerGroupOptions options_;
  int port_ = 0;
  std::thread reader_;
  std::atomic<bool> quit_reader_{false}, reader_eof_{false};
  mutable std::mutex mu_;
  mutable std::vector<int64_t> pids_;
  mutable bool pids_complete_ = false;
  std::deque<std::string> last_lines_;
  std::string exit_reason_;
  bool reaped_ = false, killed_ = false;
};

// Spawns `argv` in a new process group with stdout and stderr on `out_fd`.
StatusOr<pid_t> spawn(const std::vector<std::string>& argv, int out_fd) {
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&fa);
  posix_spawnattr_init(&attr);
  posix_spawn_file_actions_adddup2(&fa, out_fd, STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&fa, out_fd, STDERR_FILENO);
  posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  // Nothing else of this process (its listening socket) leaks into the group.
  posix_spawn_file_actions_addclosefrom_np(&fa, 3);
  posix_spawnattr_setpgroup(&attr, 0);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  sigset_t defaults;
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGPIPE);
  sigaddset(&defaults, SIGTERM);
  sigaddset(&defaults, SIGINT);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  std::vector<char*> cargv;
  for (const std::string& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  pid_t pid = -1;
  const int err = ::posix_spawnp(&pid, cargv[0], &fa, &attr, cargv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (err != 0) return internal_error("cannot start the worker group '" + argv[0] + "': " + std::strerror(err));
  return pid;
}

// True when the endpoint on `port` answers /health with state "ok".
bool endpoint_ready(int port, double timeout_seconds) {
  httplib::Client cli("127.0.0.1", port);
  const auto usec = static_cast<time_t>(timeout_seconds * 1e6);
  cli.set_connection_timeout(usec / 1000000, usec % 1000000);
  cli.set_read_timeout(usec / 1000000, usec % 1000000);
  auto res = cli.Get("/health");
  if (!res || res->status != 200) return false;
  auto h = decode_health(res->body);
  return h.ok() && h.value().ok();
}

// Each supervisor's rendezvous directory names its owner (a pid): a front end that was
// SIGKILLed could not remove its own, so the next one removes those whose owner is gone.
constexpr const char* kOwnerFile = "supervisor.pid";

void remove_stale_rendezvous_dirs(const std::string& base) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(base, ec)) {
    if (e.path().filename().string().rfind("moe-supervisor-", 0) != 0) continue;
    std::ifstream owner(e.path() / kOwnerFile);
    long pid = 0;
    if (!(owner >> pid) || pid <= 0) continue;  // not ours to judge (older, or being created)
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM) continue;  // its owner is alive
    std::error_code rm;
    std::filesystem::remove_all(e.path(), rm);
  }
}

}  // namespace

ProcessLauncher::ProcessLauncher(WorkerGroupOptions options) : options_(std::move(options)) {}

ProcessLauncher::~ProcessLauncher() {
  if (!root_dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(root_dir_, ec);
  }
}

StatusOr<std::unique_ptr<WorkerHandle>> ProcessLauncher::launch(double timeout_seconds,
                                                                const std::atomic<bool>* cancel) {
  if (options_.command.empty()) return invalid_argument("worker group: empty command");
  if (root_dir_.empty()) {
    std::string base = options_.work_dir;
    if (base.empty()) {
      const char* tmp = std::getenv("TMPDIR");
      base = tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
    }
    remove_stale_rendezvous_dirs(base);
    std::string templ = base + "/moe-supervisor-XXXXXX";
    if (::mkdtemp(templ.data()) == nullptr) {
      return internal_error("cannot create a rendezvous directory under " + base + ": " + std::strerror(errno));
    }
    root_dir_ = templ;
    std::ofstream(root_dir_ + "/" + kOwnerFile) << ::getpid() << "\n";
  }
  const int generation = ++launches_;
  const std::string dir = root_dir_ + "/group-" + std::to_string(generation);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return internal_error("cannot create " + dir + ": " + ec.message());

  std::vector<std::string> argv = options_.command;
  argv.insert(argv.end(), {"--worker-endpoint", dir, "--supervisor-pid", std::to_string(::getpid())});
  argv.insert(argv.end(), options_.args.begin(), options_.args.end());
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return internal_error(std::string("pipe: ") + std::strerror(errno));
  auto pid = spawn(argv, fds[1]);
  ::close(fds[1]);
  if (!pid.ok()) {
    ::close(fds[0]);
    return pid.status();
  }
  auto group = std::make_unique<ProcessGroup>(pid.value(), fds[0], generation, dir, options_);
  MOE_LOG_INFO("supervisor: started worker group {} (pid {})", generation, pid.value());

  const auto start = Clock::now();
  const auto deadline = start + std::chrono::duration<double>(timeout_seconds);
  while (true) {
    const std::string exited = group->exit_reason();
    if (!exited.empty()) {
      return Status(StatusCode::kUnavailable, "worker group " + std::to_string(generation) +
                                                  " ended during start-up: " + exited);
    }
    auto port = read_endpoint_port(dir);
    if (port.ok() && endpoint_ready(port.value(), options_.probe_timeout_seconds)) {
      group->set_port(port.value());
      break;
    }
    if (!port.ok() && port.status().code() == StatusCode::kDataLoss) {
      group->kill();
      return port.status();
    }
    if (cancel != nullptr && cancel->load()) {
      group->kill();
      return Status(StatusCode::kUnavailable, "worker group " + std::to_string(generation) + ": start-up cancelled");
    }
    if (Clock::now() >= deadline) {
      group->kill();
      return Status(StatusCode::kDeadlineExceeded, "worker group " + std::to_string(generation) +
                                                       " was not ready within " + std::to_string(timeout_seconds) +
                                                       " s (no endpoint answering in " + dir + ")");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  // Rank pid files are written right after the engine opens: give the others a moment.
  const auto pid_deadline = Clock::now() + std::chrono::seconds(2);
  while (Clock::now() < pid_deadline) {
    bool all = true;
    for (int64_t p : read_rank_pids(dir, options_.num_ranks)) all &= p > 0;
    if (all) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return std::unique_ptr<WorkerHandle>(std::move(group));
}

}  // namespace moe::supervisor
