#include "moe/serve_bench/chaos_scratch.h"

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace moe::serve_bench {
namespace {

namespace fs = std::filesystem;
constexpr char kPrefix[] = "moe-chaos-store-";

}  // namespace

StatusOr<std::string> make_chaos_scratch_dir(const std::string& root) {
  std::string tmpl = root + "/" + kPrefix + std::to_string(::getpid()) + "-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) {
    return invalid_argument("cannot create a scratch directory in '" + root + "': " + std::strerror(errno));
  }
  return tmpl;
}

std::vector<std::string> remove_stale_chaos_scratch(const std::string& root) {
  std::vector<std::string> removed;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(root, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(kPrefix, 0) != 0 || !e.is_directory(ec)) continue;
    const size_t at = sizeof(kPrefix) - 1, dash = name.find('-', at);
    if (dash == std::string::npos || dash == at || dash - at > 9) continue;
    if (name.find_first_not_of("0123456789", at) != dash) continue;
    const pid_t pid = static_cast<pid_t>(std::stol(name.substr(at, dash - at)));
    if (pid <= 0 || ::kill(pid, 0) == 0 || errno != ESRCH) continue;  // alive, or not ours to judge
    std::error_code rm;
    fs::remove_all(e.path(), rm);
    if (!rm) removed.push_back(e.path().string());
  }
  return removed;
}

}  // namespace moe::serve_bench
