#define PCRE2_CODE_UNIT_WIDTH 8
#include "moe/model/hf/regex.h"

#include <pcre2.h>

#include "moe/model/hf/utf8_util.h"

namespace moe::hf {

struct Regex::Impl {
  pcre2_code* code = nullptr;
  ~Impl() {
    if (code != nullptr) pcre2_code_free(code);
  }
};

Regex::~Regex() = default;

StatusOr<std::unique_ptr<Regex>> Regex::compile(const std::string& pattern) {
  int err = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &err, &offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof(msg));
    return invalid_argument("regex does not compile: " + std::string(reinterpret_cast<const char*>(msg)) +
                            " at offset " + std::to_string(offset));
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter if JIT is unavailable
  std::unique_ptr<Regex> r(new Regex());
  r->impl_ = std::make_unique<Impl>();
  r->impl_->code = code;
  return r;
}

std::vector<std::pair<size_t, size_t>> Regex::find_all(std::string_view text) const {
  std::vector<std::pair<size_t, size_t>> out;
  // One match-data block per thread, reused (pcre2_match_data is not shareable).
  struct MatchData {
    pcre2_match_data* md = pcre2_match_data_create(1, nullptr);
    ~MatchData() { pcre2_match_data_free(md); }
  };
  thread_local MatchData data;
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t start = 0;
  uint32_t options = 0;
  while (start <= text.size()) {
    // Inputs are valid UTF-8 (lossy-cleaned upstream), so the per-call check is skipped.
    const int rc = pcre2_match(impl_->code, subject, text.size(), start, options | PCRE2_NO_UTF_CHECK, data.md, nullptr);
    if (rc < 0) break;
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(data.md);
    if (ov[1] > ov[0]) {
      out.emplace_back(ov[0], ov[1]);
      start = ov[1];
    } else {
      // An empty match: step over one character.
      if (ov[0] >= text.size()) break;
      start = ov[0] + static_cast<size_t>(utf8_len(static_cast<unsigned char>(text[ov[0]])));
    }
  }
  return out;
}

}  // namespace moe::hf
