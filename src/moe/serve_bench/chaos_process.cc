#include "moe/serve_bench/chaos_process.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <optional>
#include <regex>
#include <set>
#include <sstream>

extern char** environ;

namespace moe::serve_bench {

namespace {

// The whole of a small /proc file, or nullopt when it cannot be opened or read. A process
// can exit between the open and the read (read() then fails with ESRCH): that is a
// vanished process, not an error. (std::ifstream with istreambuf_iterator throws
// std::ios_base::failure there, which ended `moe bench chaos` mid-run.)
std::optional<std::string> read_proc_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::string text;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      ::close(fd);
      return std::nullopt;
    }
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return text;
}

}  // namespace

StatusOr<ProcInfo> read_proc_info(const std::string& proc_root, pid_t pid) {
  const std::string path = proc_root + "/" + std::to_string(pid) + "/stat";
  const std::optional<std::string> read = read_proc_file(path);
  if (!read) return not_found("no process " + std::to_string(pid) + " (" + path + ")");
  const std::string& text = *read;
  // "pid (comm) state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt
  //  utime stime cutime cstime priority nice num_threads itrealvalue starttime ..."
  const size_t close = text.rfind(')');
  if (close == std::string::npos || close + 2 >= text.size()) return data_loss(path + ": malformed stat line");
  std::istringstream rest(text.substr(close + 2));
  std::vector<std::string> f;
  std::string tok;
  while (rest >> tok) f.push_back(tok);
  // f[0] = state (field 3), f[1] = ppid, f[2] = pgrp, f[19] = starttime (field 22).
  if (f.size() < 20 || f[0].size() != 1) return data_loss(path + ": malformed stat line");
  ProcInfo p;
  p.pid = pid;
  p.state = f[0][0];
  try {
    p.ppid = static_cast<pid_t>(std::stol(f[1]));
    p.pgid = static_cast<pid_t>(std::stol(f[2]));
    p.start_ticks = std::stoull(f[19]);
  } catch (const std::exception&) {
    return data_loss(path + ": malformed stat line");
  }
  return p;
}

std::vector<ProcInfo> list_processes(const std::string& proc_root) {
  std::vector<ProcInfo> out;
  DIR* dir = opendir(proc_root.c_str());
  if (dir == nullptr) return out;
  while (dirent* e = readdir(dir)) {
    const char* name = e->d_name;
    if (*name == '\0' || !std::all_of(name, name + std::strlen(name), [](char c) { return c >= '0' && c <= '9'; })) {
      continue;
    }
    auto info = read_proc_info(proc_root, static_cast<pid_t>(std::atol(name)));
    if (info.ok()) out.push_back(*info);
  }
  closedir(dir);
  return out;
}

std::vector<ProcInfo> descendants_of(const std::vector<ProcInfo>& procs, pid_t root) {
  std::vector<ProcInfo> out;
  std::set<pid_t> frontier = {root};
  std::set<pid_t> seen = {root};
  while (!frontier.empty()) {
    std::set<pid_t> next;
    for (const ProcInfo& p : procs) {
      if (frontier.count(p.ppid) != 0 && seen.insert(p.pid).second) {
        out.push_back(p);
        next.insert(p.pid);
      }
    }
    frontier = std::move(next);
  }
  return out;
}

int mpi_rank_of(const std::string& proc_root, pid_t pid) {
  const std::optional<std::string> text = read_proc_file(proc_root + "/" + std::to_string(pid) + "/environ");
  if (!text) return -1;
  std::istringstream env(*text);
  const std::string key = "OMPI_COMM_WORLD_RANK=";
  std::string var;
  while (std::getline(env, var, '\0')) {
    if (var.rfind(key, 0) == 0) {
      try {
        return std::stoi(var.substr(key.size()));
      } catch (const std::exception&) {
        return -1;
      }
    }
  }
  return -1;
}

std::map<int, pid_t> find_rank_pids(const std::string& proc_root, pid_t root) {
  std::map<int, pid_t> ranks;
  std::map<int, uint64_t> started;
  for (const ProcInfo& p : descendants_of(list_processes(proc_root), root)) {
    if (p.state == 'Z' || p.state == 'X') continue;
    const int r = mpi_rank_of(proc_root, p.pid);
    if (r < 0) continue;
    if (ranks.count(r) == 0 || p.start_ticks >= started[r]) {
      ranks[r] = p.pid;
      started[r] = p.start_ticks;
    }
  }
  return ranks;
}

bool still_running(const std::string& proc_root, const ProcInfo& p) {
  auto now = read_proc_info(proc_root, p.pid);
  return now.ok() && now->start_ticks == p.start_ticks && now->state != 'Z' && now->state != 'X';
}

std::string describe_wait_status(int status) {
  if (WIFEXITED(status)) return "exit " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "signal " + std::to_string(WTERMSIG(status));
  return "status " + std::to_string(status);
}

int find_serving_port(const std::string& output) {
  static const std::regex re("serving .* on http://[^ :/]+:([0-9]+)");
  std::smatch m;
  if (!std::regex_search(output, m, re)) return 0;
  try {
    return std::stoi(m[1].str());
  } catch (const std::exception&) {
    return 0;
  }
}

StatusOr<std::unique_ptr<ChildProcess>> ChildProcess::spawn(const std::vector<std::string>& argv,
                                                            const std::string& log_path) {
  if (argv.empty()) return invalid_argument("spawn: empty command");
  std::string command;
  for (const auto& a : argv) command += (command.empty() ? "" : " ") + a;
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return internal_error("cannot create a pipe for '" + command + "': " + std::strerror(errno));
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDERR_FILENO);
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  posix_spawnattr_setpgroup(&attr, 0);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  std::vector<char*> cargv;
  std::vector<std::string> copy = argv;
  for (auto& a : copy) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  pid_t pid = -1;
  const int rc = posix_spawnp(&pid, cargv[0], &actions, &attr, cargv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    return internal_error("cannot start '" + command + "': " + std::strerror(rc));
  }
  std::unique_ptr<ChildProcess> child(new ChildProcess());
  child->pid_ = pid;
  child->fd_ = fds[0];
  if (!log_path.empty()) child->log_fd_ = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ChildProcess* self = child.get();
  child->reader_ = std::thread([self] {
    char buf[4096];
    while (!self->stop_.load()) {
      pollfd pfd{self->fd_, POLLIN, 0};
      const int ready = poll(&pfd, 1, 50);
      if (ready < 0 && errno == EINTR) continue;
      if (ready <= 0) continue;
      const ssize_t n = read(self->fd_, buf, sizeof(buf));
      if (n <= 0) break;
      std::lock_guard<std::mutex> lock(self->mu_);
      self->output_.append(buf, static_cast<size_t>(n));
      if (self->log_fd_ >= 0) (void)!write(self->log_fd_, buf, static_cast<size_t>(n));
    }
    self->eof_.store(true);
  });
  return child;
}

ChildProcess::~ChildProcess() {
  kill_all();
  // The reader ends at EOF, once every holder of the pipe's write end is gone; a process
  // that escaped every kill may still hold it: stop reading after a short wait.
  for (int i = 0; i < 100 && !eof_.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  stop_.store(true);
  if (reader_.joinable()) reader_.join();
  if (fd_ >= 0) close(fd_);
  if (log_fd_ >= 0) close(log_fd_);
}

std::string ChildProcess::output() const {
  std::lock_guard<std::mutex> lock(mu_);
  return output_;
}

void ChildProcess::wait_output_end(double seconds) const {
  for (double waited = 0; waited < seconds && !eof_.load(); waited += 0.005) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

bool ChildProcess::exited(int* status) {
  if (!reaped_ && pid_ > 0) {
    int s = 0;
    if (waitpid(pid_, &s, WNOHANG) == pid_) {
      reaped_ = true;
      status_ = s;
    }
  }
  if (reaped_ && status != nullptr) *status = status_;
  return reaped_;
}

void ChildProcess::kill_all(const std::vector<ProcInfo>& also) {
  if (pid_ <= 0) return;
  ::kill(-pid_, SIGKILL);
  for (const ProcInfo& p : also) {
    if (still_running("/proc", p)) ::kill(p.pid, SIGKILL);
  }
  if (!reaped_) {
    for (int i = 0; i < 500 && !exited(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (!reaped_) {
      ::kill(pid_, SIGKILL);
      int s = 0;
      if (waitpid(pid_, &s, 0) == pid_) {
        reaped_ = true;
        status_ = s;
      }
    }
  }
}

}  // namespace moe::serve_bench
