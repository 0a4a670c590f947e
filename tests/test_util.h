// Helpers shared by tests: paths to repository data, file I/O, running the CLI.
#pragma once

#include <sys/stat.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace moe::testing {

inline std::string source_dir() { return MOE_SOURCE_DIR; }
inline std::string tiny_model_dir() { return source_dir() + "/models/tiny-mixtral-shakespeare"; }
inline std::string golden_dir() { return source_dir() + "/tests/data/golden"; }
inline std::string moe_binary() { return MOE_BINARY; }
// The data shared between checkouts (routing statistics, prompts, model configs): the
// folder next to the source tree, not in the repository. Tests that need it skip loudly
// with MOE_SKIP_IF_MISSING when it is absent.
inline std::string shared_data_dir() { return source_dir() + "/../shared/data"; }

// Skips the current test, naming the missing path, when `path` does not exist.
#define MOE_SKIP_IF_MISSING(path)                                                             \
  do {                                                                                        \
    const std::string moe_skip_path_ = (path);                                                \
    struct stat moe_skip_st_ {};                                                              \
    if (::stat(moe_skip_path_.c_str(), &moe_skip_st_) != 0) {                                 \
      GTEST_SKIP() << "SKIPPED: missing " << moe_skip_path_                                   \
                   << " (shared data outside the repository; this test checks nothing without it)"; \
    }                                                                                         \
  } while (0)

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void write_file(const std::string& path, const std::string& data) {
  std::ofstream out(path, std::ios::binary);
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
}

inline std::vector<float> read_f32(const std::string& path) {
  std::string bytes = read_file(path);
  std::vector<float> out(bytes.size() / sizeof(float));
  std::copy(bytes.data(), bytes.data() + out.size() * sizeof(float), reinterpret_cast<char*>(out.data()));
  return out;
}

// A fresh empty directory under the build's temp area.
inline std::string make_temp_dir(const std::string& tag) {
  std::string templ = "/tmp/moe_test_" + tag + "_XXXXXX";
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  char* dir = mkdtemp(buf.data());
  return dir ? std::string(dir) : std::string();
}

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

// Runs a shell command line, capturing stdout+stderr.
inline CommandResult run_command(const std::string& cmd) {
  CommandResult r;
  FILE* pipe = popen((cmd + " 2>&1").c_str(), "r");
  if (!pipe) return r;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) r.output.append(buf.data(), n);
  int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// Quotes a string for the shell.
inline std::string sh_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') out += "'\\''";
    else out += c;
  }
  return out + "'";
}

}  // namespace moe::testing
