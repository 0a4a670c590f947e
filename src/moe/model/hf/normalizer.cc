#include "moe/model/hf/normalizer.h"

#include <cstdlib>
#include <vector>

#include <utf8proc.h>

#include "moe/model/hf/utf8_util.h"

namespace moe::hf {
namespace {

class UnicodeForm : public Normalizer {
 public:
  explicit UnicodeForm(int options) : options_(options) {}
  std::string normalize(const std::string& text) const override {
    // ASCII is already in every normal form.
    bool ascii = true;
    for (unsigned char c : text) ascii = ascii && c < 0x80;
    if (ascii) return text;
    utf8proc_uint8_t* out = nullptr;
    const utf8proc_ssize_t n =
        utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()), static_cast<utf8proc_ssize_t>(text.size()),
                     &out, static_cast<utf8proc_option_t>(UTF8PROC_STABLE | options_));
    if (n < 0) return text;  // invalid UTF-8 cannot reach here (inputs are lossy-cleaned)
    std::string result(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
    std::free(out);
    return result;
  }

 private:
  int options_;
};

class Lowercase : public Normalizer {
 public:
  std::string normalize(const std::string& text) const override {
    std::string out;
    out.reserve(text.size());
    for (size_t i = 0; i < text.size();) append_utf8(out, static_cast<char32_t>(utf8proc_tolower(next_code_point(text, i))));
    return out;
  }
};

class Prepend : public Normalizer {
 public:
  explicit Prepend(std::string p) : prepend_(std::move(p)) {}
  std::string normalize(const std::string& text) const override { return text.empty() ? text : prepend_ + text; }

 private:
  std::string prepend_;
};

class Replace : public Normalizer {
 public:
  Replace(std::string from, std::string to) : from_(std::move(from)), to_(std::move(to)) {}
  std::string normalize(const std::string& text) const override {
    if (from_.empty()) return text;
    std::string out;
    size_t pos = 0;
    for (size_t hit; (hit = text.find(from_, pos)) != std::string::npos; pos = hit + from_.size()) {
      out.append(text, pos, hit - pos);
      out.append(to_);
    }
    out.append(text, pos, std::string::npos);
    return out;
  }

 private:
  std::string from_, to_;
};

class Sequence : public Normalizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<Normalizer>> parts) : parts_(std::move(parts)) {}
  std::string normalize(const std::string& text) const override {
    std::string s = text;
    for (const auto& p : parts_) s = p->normalize(s);
    return s;
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> parts_;
};

}  // namespace

StatusOr<std::unique_ptr<Normalizer>> parse_normalizer(const Json& j, const std::string& where) {
  if (j.is_null()) return std::unique_ptr<Normalizer>();
  MOE_ASSIGN_OR_RETURN(std::string type, get_type(j, where));
  if (type == "NFC") return std::unique_ptr<Normalizer>(new UnicodeForm(UTF8PROC_COMPOSE));
  if (type == "NFD") return std::unique_ptr<Normalizer>(new UnicodeForm(UTF8PROC_DECOMPOSE));
  if (type == "NFKC") return std::unique_ptr<Normalizer>(new UnicodeForm(UTF8PROC_COMPOSE | UTF8PROC_COMPAT));
  if (type == "NFKD") return std::unique_ptr<Normalizer>(new UnicodeForm(UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT));
  if (type == "Lowercase") return std::unique_ptr<Normalizer>(new Lowercase());
  if (type == "Prepend") {
    MOE_ASSIGN_OR_RETURN(std::string p, get_string(j, "prepend", where));
    return std::unique_ptr<Normalizer>(new Prepend(p));
  }
  if (type == "Replace") {
    auto pat = j.find("pattern");
    if (pat == j.end() || !pat->is_object() || !pat->contains("String") || !(*pat)["String"].is_string()) {
      return bad(field(where, "pattern"), "only {\"String\": ...} patterns are supported in a Replace normalizer");
    }
    MOE_ASSIGN_OR_RETURN(std::string content, get_string(j, "content", where));
    return std::unique_ptr<Normalizer>(new Replace((*pat)["String"].get<std::string>(), content));
  }
  if (type == "Sequence") {
    MOE_ASSIGN_OR_RETURN(const Json* list, get_array(j, "normalizers", where));
    std::vector<std::unique_ptr<Normalizer>> parts;
    for (size_t i = 0; i < list->size(); ++i) {
      MOE_ASSIGN_OR_RETURN(auto p, parse_normalizer((*list)[i], item(field(where, "normalizers"), i)));
      if (p) parts.push_back(std::move(p));
    }
    return std::unique_ptr<Normalizer>(new Sequence(std::move(parts)));
  }
  return bad(field(where, "type"), "unsupported normalizer type \"" + type +
                                       "\" (supported: NFC, NFD, NFKC, NFKD, Lowercase, Prepend, Replace, Sequence)");
}

}  // namespace moe::hf
