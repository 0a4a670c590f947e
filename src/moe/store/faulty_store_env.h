// A StoreEnv for tests that fails like a full disk: after `fail_after_bytes` bytes have
// been appended in total (over all files), every append fails with "No space left on
// device" naming the file. The append that crosses the limit writes the bytes that still
// fit first, as a real full disk does (a short write), so the file holds a torn tail.
// Optionally renames fail too (EIO). Everything else goes to `base`.
// Thread-safe (the byte count is atomic).
#pragma once

#include <atomic>
#include <cstdint>

#include "moe/store/store_env.h"

namespace moe {

struct StoreFaultPlan {
  int64_t fail_after_bytes = -1;  // < 0: appends never fail
  bool fail_renames = false;      // every rename_file fails (as EIO)
};

class FaultyStoreEnv final : public StoreEnv {
 public:
  FaultyStoreEnv(StoreEnv& base, StoreFaultPlan plan) : base_(base), plan_(plan) {}

  StatusOr<std::unique_ptr<WritableFile>> new_writable_file(const std::string& path) override;
  Status rename_file(const std::string& from, const std::string& to) override;
  Status remove_file(const std::string& path) override { return base_.remove_file(path); }
  Status create_dirs(const std::string& path) override { return base_.create_dirs(path); }
  Status sync_dir(const std::string& path) override { return base_.sync_dir(path); }
  bool file_exists(const std::string& path) override { return base_.file_exists(path); }
  StatusOr<std::vector<std::string>> list_dir(const std::string& dir) override { return base_.list_dir(dir); }

  // Bytes appended so far, counting whole failed appends (of which only the part up to
  // fail_after_bytes reached the file).
  int64_t bytes_appended() const { return bytes_.load(); }

 private:
  friend class FaultyWritableFile;
  StoreEnv& base_;
  StoreFaultPlan plan_;
  std::atomic<int64_t> bytes_{0};
};

}  // namespace moe
