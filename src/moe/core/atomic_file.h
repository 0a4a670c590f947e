// Writing a whole file atomically (the LevelDB recipe): readers see the old file or the
// new one, never a half-written one.
#pragma once

#include <string>
#include <string_view>

#include "moe/status.h"

namespace moe {

// Replaces `path` with `contents` (raw bytes, written as they are):
//   1. creates a temp file "<path>.tmp.<pid>.<n>" in the same directory (mode 0666 less the
//      umask, like std::ofstream),
//   2. writes all bytes and fsyncs it,
//   3. renames it over `path` (atomic on POSIX), then fsyncs the directory (best effort).
// Errors: Internal naming `path` (or the temp file) and the OS reason, e.g. a missing
// directory or `path` being a directory. On any error `path` is untouched (the old file,
// or none) and the temp file is removed. Thread-safe for different paths; concurrent
// writers of one path each write a whole file and the last rename wins.
Status write_file_atomically(const std::string& path, std::string_view contents);

}  // namespace moe
