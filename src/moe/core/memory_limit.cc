#include "moe/core/memory_limit.h"

#include <fstream>
#include <sstream>
#include <vector>

namespace moe {
namespace {

// The number in `path` (a cgroup limit file); false when missing, "max", or not a number.
bool read_limit(const std::string& path, uint64_t* out) {
  std::ifstream f(path);
  std::string word;
  if (!(f >> word) || word == "max") return false;
  try {
    size_t used = 0;
    const unsigned long long v = std::stoull(word, &used);
    if (used != word.size()) return false;
    *out = v;
    return true;
  } catch (...) {
    return false;
  }
}

// "/a/b/c" -> {"/a/b/c", "/a/b", "/a", ""} (the cgroup and its ancestors, root last), and
// the same for each tail of it ("/b/c", "/c"): in a container without a cgroup namespace,
// /proc/self/cgroup names the path from the host's root while the container's
// /sys/fs/cgroup is mounted at some ancestor, so the cgroup may sit at a tail of the path.
std::vector<std::string> ancestors(const std::string& full) {
  std::vector<std::string> out;
  std::string tail = full;
  while (!tail.empty() && tail != "/") {
    for (std::string path = tail; !path.empty() && path != "/";) {
      out.push_back(path);
      const size_t slash = path.rfind('/');
      path = slash == std::string::npos ? std::string() : path.substr(0, slash);
    }
    const size_t next = tail.find('/', 1);
    tail = next == std::string::npos ? std::string() : tail.substr(next);
  }
  out.push_back("");
  return out;
}

}  // namespace

MemoryLimit memory_limit(const std::string& cgroup_root, const std::string& proc_cgroup, const std::string& meminfo) {
  MemoryLimit best;
  {
    std::ifstream f(meminfo);
    std::string key;
    uint64_t kb = 0;
    while (f >> key) {
      if (key == "MemTotal:" && (f >> kb)) {
        best = {kb * 1024, "MemTotal"};
        break;
      }
      std::string rest;
      std::getline(f, rest);
    }
  }
  auto consider = [&](const std::string& file) {
    uint64_t v = 0;
    if (read_limit(file, &v) && (best.bytes == 0 || v < best.bytes)) best = {v, file};
  };
  // Lines "id:controllers:path": v2 has id 0 and no controllers; v1's memory line names "memory".
  std::ifstream f(proc_cgroup);
  std::string line;
  while (std::getline(f, line)) {
    const size_t a = line.find(':'), b = line.find(':', a == std::string::npos ? a : a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    std::stringstream list(controllers);
    std::string c;
    bool memory = false;
    while (std::getline(list, c, ',')) memory = memory || c == "memory";
    for (const std::string& p : ancestors(path)) {
      if (controllers.empty()) {
        consider(cgroup_root + p + "/memory.max");
        consider(cgroup_root + "/unified" + p + "/memory.max");
      } else if (memory) {
        consider(cgroup_root + "/memory" + p + "/memory.limit_in_bytes");
      }
    }
  }
  return best;
}

}  // namespace moe
