// `moe bench chaos`'s scratch copy of an expert store (corrupt trials damage the copy,
// never the original): a directory <root>/moe-chaos-store-<pid>-XXXXXX named after the
// process that made it, so that a later run can tell a copy left behind by a harness
// killed by a signal (its pid no longer alive) from one in use, and remove it.
#pragma once

#include <string>
#include <vector>

#include "moe/status.h"

namespace moe::serve_bench {

// Creates <root>/moe-chaos-store-<this pid>-XXXXXX (mkdtemp). InvalidArgument naming
// the root and the OS error if it cannot.
StatusOr<std::string> make_chaos_scratch_dir(const std::string& root);

// Removes every <root>/moe-chaos-store-<pid>-* whose pid is not a live process
// (kill(pid, 0) fails with ESRCH); returns the paths removed. Directories of live
// processes and other names are left alone; errors (an unreadable root) remove nothing.
std::vector<std::string> remove_stale_chaos_scratch(const std::string& root);

}  // namespace moe::serve_bench
