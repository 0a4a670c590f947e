// How much memory this process may use: the smallest of the machine's MemTotal and the
// memory limits of the cgroups it is in (v2 memory.max, v1 memory.limit_in_bytes, each
// of its cgroup and of that cgroup's ancestors, as the kernel enforces all of them; the
// cgroup is also looked for at each tail of its path, for containers that mount the
// cgroup tree at an ancestor without a cgroup namespace).
// Sizing the KV pool by it keeps a server under a container's limit from being
// OOM-killed at its first large batch.
#pragma once

#include <cstdint>
#include <string>

namespace moe {

struct MemoryLimit {
  uint64_t bytes = 0;  // 0: unknown (no /proc/meminfo)
  // What set it: "MemTotal", or the limit file's path (e.g.
  // "/sys/fs/cgroup/memory/job/memory.limit_in_bytes").
  std::string source;
};

// Reads /proc/meminfo, /proc/self/cgroup and the cgroup files under `cgroup_root`
// (default /sys/fs/cgroup; tests pass a directory of their own, with `proc_cgroup` and
// `meminfo` the files to read instead of /proc's). Never fails: unreadable files are
// skipped. Thread-safe.
MemoryLimit memory_limit(const std::string& cgroup_root = "/sys/fs/cgroup",
                         const std::string& proc_cgroup = "/proc/self/cgroup",
                         const std::string& meminfo = "/proc/meminfo");

}  // namespace moe
