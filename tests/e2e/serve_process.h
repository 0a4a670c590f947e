// Starts `moe serve` (optionally under mpirun) as a child process for end-to-end tests,
// reads the port from its "serving ... on http://HOST:PORT" line, stops it with SIGTERM.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <mutex>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "test_util.h"

namespace moe::testing {

class ServeProcess {
 public:
  // `args`: the moe serve flags after `serve` (--port 0 is added). `mpirun_np` > 0
  // runs it under mpirun with that many ranks (and `mpirun_args` before -np).
  explicit ServeProcess(const std::vector<std::string>& args, int mpirun_np = 0, const std::string& log_level = "",
                        const std::vector<std::string>& mpirun_args = {}) {
    std::vector<std::string> argv;
    if (mpirun_np > 0) {
      argv = {"mpirun", "--allow-run-as-root", "--oversubscribe"};
      argv.insert(argv.end(), mpirun_args.begin(), mpirun_args.end());
      argv.push_back("-np");
      argv.push_back(std::to_string(mpirun_np));
    }
    argv.push_back(moe_binary());
    if (!log_level.empty()) {
      argv.push_back("--log-level");
      argv.push_back(log_level);
    }
    argv.push_back("serve");
    argv.push_back("--port");
    argv.push_back("0");
    argv.insert(argv.end(), args.begin(), args.end());
    int fds[2];
    if (pipe(fds) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      setpgid(0, 0);
      dup2(fds[1], STDERR_FILENO);
      dup2(fds[1], STDOUT_FILENO);
      close(fds[0]);
      close(fds[1]);
      std::vector<char*> cargv;
      for (auto& a : argv) cargv.push_back(a.data());
      cargv.push_back(nullptr);
      execvp(cargv[0], cargv.data());
      _exit(127);
    }
    close(fds[1]);
    fd_ = fds[0];
    reader_ = std::thread([this] {
      char buf[4096];
      ssize_t n;
      while ((n = read(fd_, buf, sizeof(buf))) > 0) {
        std::lock_guard<std::mutex> lock(mu_);
        log_.append(buf, static_cast<size_t>(n));
      }
    });
    // Wait (up to 60 s) for the listening line.
    const std::regex re("serving .* on http://([0-9.]+):([0-9]+)");
    for (int i = 0; i < 600 && port_ == 0; ++i) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        std::smatch m;
        if (std::regex_search(log_, m, re)) port_ = std::stoi(m[2].str());
      }
      if (port_ == 0) {
        int status;
        if (waitpid(pid_, &status, WNOHANG) == pid_) {
          pid_ = -1;
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    }
  }

  ~ServeProcess() {
    if (pid_ > 0) {
      kill(-pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (reader_.joinable()) reader_.join();
    if (fd_ >= 0) close(fd_);
  }

  int port() const { return port_; }
  std::string base_url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::string log() {
    std::lock_guard<std::mutex> lock(mu_);
    return log_;
  }

  // Under mpirun: the pid of rank 0 (a child of mpirun with OMPI_COMM_WORLD_RANK=0), or -1.
  pid_t rank0_pid() const { return rank_pid(0); }
  // Under mpirun: the pid of rank `rank` (a child of mpirun whose environment has
  // OMPI_COMM_WORLD_RANK=rank), or -1.
  pid_t rank_pid(int rank) const {
    std::ifstream children("/proc/" + std::to_string(pid_) + "/task/" + std::to_string(pid_) + "/children");
    const std::string want = "OMPI_COMM_WORLD_RANK=" + std::to_string(rank);
    pid_t child;
    while (children >> child) {
      std::ifstream env("/proc/" + std::to_string(child) + "/environ", std::ios::binary);
      std::string var;
      while (std::getline(env, var, '\0')) {
        if (var == want) return child;
      }
    }
    return -1;
  }

  // Waits up to `timeout_seconds` for the started process to exit by itself; returns
  // its exit status, 128 + the signal if a signal ended it, or -1 on timeout.
  int wait_exit(double timeout_seconds) {
    if (pid_ <= 0) return -1;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_seconds);
    int status = 0;
    while (std::chrono::steady_clock::now() < deadline) {
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return -1;
  }

  // SIGTERM (graceful shutdown) to `target` (default: the started process, e.g. mpirun);
  // waits for the started process and returns its exit status (-1 if killed or timed out).
  int terminate(double timeout_seconds = 60, pid_t target = -1) {
    if (pid_ <= 0) return -1;
    kill(target > 0 ? target : pid_, SIGTERM);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_seconds);
    int status = 0;
    while (std::chrono::steady_clock::now() < deadline) {
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return -1;
  }

 private:
  pid_t pid_ = -1;
  int fd_ = -1;
  int port_ = 0;
  std::thread reader_;
  std::mutex mu_;
  std::string log_;
};

// `moe generate` greedy text for a prompt (the reference a served request must equal).
inline std::string generate_text(const std::string& prompt, int max_tokens, const std::string& extra = "") {
  CommandResult r = run_command(moe_binary() + " generate --temperature 0 --format json --threads 1 --max-tokens " +
                                std::to_string(max_tokens) + " --prompt " + sh_quote(prompt) + " " + extra +
                                " 2>/dev/null");
  const size_t brace = r.output.find('{');
  if (r.exit_code != 0 || brace == std::string::npos) return "<moe generate failed: " + r.output + ">";
  return nlohmann::json::parse(r.output.substr(brace))["text"].get<std::string>();
}

// One streamed completion through httplib: the concatenated text and the SSE chunks.
struct Streamed {
  int status = 0;
  std::string text, finish_reason;
  int chunks = 0;
  bool done = false;  // saw data: [DONE]
};

// `model`: the served model name (the model directory's name by default).
inline Streamed stream_completion(const std::string& host, int port, const std::string& prompt, int max_tokens,
                                  bool ignore_eos = false, std::atomic<bool>* first_chunk = nullptr,
                                  const std::string& model = "tiny-mixtral-shakespeare") {
  httplib::Client cli(host, port);
  cli.set_read_timeout(300, 0);
  nlohmann::json body = {{"model", model}, {"prompt", prompt}, {"max_tokens", max_tokens},
                         {"temperature", 0}, {"stream", true}};
  if (ignore_eos) body["ignore_eos"] = true;
  Streamed out;
  std::string buf;
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.headers = {{"Content-Type", "application/json"}};
  req.body = body.dump();
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    buf.append(data, n);
    size_t pos;
    while ((pos = buf.find("\n\n")) != std::string::npos) {
      std::string event = buf.substr(0, pos);
      buf.erase(0, pos + 2);
      if (event.rfind("data: ", 0) != 0) continue;
      std::string payload = event.substr(6);
      if (payload == "[DONE]") {
        out.done = true;
        continue;
      }
      auto j = nlohmann::json::parse(payload, nullptr, false);
      if (j.is_discarded() || !j.contains("choices") || j["choices"].empty()) continue;
      ++out.chunks;
      if (first_chunk != nullptr) first_chunk->store(true);
      out.text += j["choices"][0].value("text", "");
      if (j["choices"][0].contains("finish_reason") && j["choices"][0]["finish_reason"].is_string()) {
        out.finish_reason = j["choices"][0]["finish_reason"].get<std::string>();
      }
    }
    return true;
  };
  auto res = cli.send(req);
  out.status = res ? res->status : -1;
  return out;
}

// Distinct Shakespeare-style prompts of varied length.
inline std::vector<std::string> serve_prompts(size_t n) {
  const std::vector<std::string> who = {"ROMEO", "JULIET", "HAMLET", "KING LEAR", "MACBETH", "OTHELLO", "PORTIA",
                                        "BRUTUS"};
  const std::vector<std::string> line = {"", "What say you?", "Now, my lord,", "I pray thee, tell me",
                                         "O, what a rogue and peasant slave am I!"};
  std::vector<std::string> out;
  for (size_t i = 0; i < n; ++i) out.push_back(who[i % who.size()] + ":\n" + line[(i / who.size()) % line.size()]);
  return out;
}

}  // namespace moe::testing
