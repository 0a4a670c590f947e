#include "moe/store/faulty_store_env.h"

namespace moe {

// Counts every append against the env's budget; the append that would pass it writes
// the bytes that still fit (as a full disk does) and then fails.
class FaultyWritableFile final : public WritableFile {
 public:
  FaultyWritableFile(FaultyStoreEnv& env, std::unique_ptr<WritableFile> base) : env_(env), base_(std::move(base)) {}

  Status append(const void* data, size_t size) override {
    const int64_t limit = env_.plan_.fail_after_bytes;
    const int64_t before = env_.bytes_.fetch_add(static_cast<int64_t>(size));
    if (limit < 0 || before + static_cast<int64_t>(size) <= limit) return base_->append(data, size);
    const int64_t fits = before < limit ? limit - before : 0;
    if (fits > 0) MOE_RETURN_IF_ERROR(base_->append(data, static_cast<size_t>(fits)));
    return internal_error("cannot write " + base_->path() + ": No space left on device");
  }
  Status sync() override { return base_->sync(); }
  Status close() override { return base_->close(); }
  const std::string& path() const override { return base_->path(); }

 private:
  FaultyStoreEnv& env_;
  std::unique_ptr<WritableFile> base_;
};

StatusOr<std::unique_ptr<WritableFile>> FaultyStoreEnv::new_writable_file(const std::string& path) {
  MOE_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> base, base_.new_writable_file(path));
  return std::unique_ptr<WritableFile>(new FaultyWritableFile(*this, std::move(base)));
}

Status FaultyStoreEnv::rename_file(const std::string& from, const std::string& to) {
  if (plan_.fail_renames) return internal_error("cannot rename " + from + " to " + to + ": Input/output error");
  return base_.rename_file(from, to);
}

}  // namespace moe
