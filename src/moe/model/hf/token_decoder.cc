#include "moe/model/hf/token_decoder.h"

#include <cctype>

#include "moe/model/hf/utf8_util.h"

namespace moe::hf {
namespace {

class ByteLevel : public TokenDecoder {
 public:
  void decode_chain(std::vector<std::string>* tokens) const override {
    std::string bytes;
    for (const std::string& t : *tokens) {
      if (!byte_level_decode(t, &bytes)) bytes.append(t);  // a token outside the alphabet: its own text
    }
    tokens->assign(1, std::move(bytes));
  }
};

class ByteFallback : public TokenDecoder {
 public:
  void decode_chain(std::vector<std::string>* tokens) const override {
    std::vector<std::string> out;
    std::string pending;  // bytes of consecutive <0xXX> tokens
    size_t pending_count = 0;
    auto flush = [&] {
      if (pending_count == 0) return;
      if (utf8_lossy(pending) == pending) {
        out.push_back(pending);
      } else {
        for (size_t k = 0; k < pending_count; ++k) out.push_back("\xEF\xBF\xBD");
      }
      pending.clear();
      pending_count = 0;
    };
    for (const std::string& t : *tokens) {
      if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' && std::isxdigit(static_cast<unsigned char>(t[3])) &&
          std::isxdigit(static_cast<unsigned char>(t[4]))) {
        pending.push_back(static_cast<char>(std::stoi(t.substr(3, 2), nullptr, 16)));
        ++pending_count;
      } else {
        flush();
        out.push_back(t);
      }
    }
    flush();
    *tokens = std::move(out);
  }
};

class Fuse : public TokenDecoder {
 public:
  void decode_chain(std::vector<std::string>* tokens) const override {
    std::string all;
    for (const std::string& t : *tokens) all += t;
    tokens->assign(1, std::move(all));
  }
};

class Replace : public TokenDecoder {
 public:
  Replace(std::string from, std::string to) : from_(std::move(from)), to_(std::move(to)) {}
  void decode_chain(std::vector<std::string>* tokens) const override {
    if (from_.empty()) return;
    for (std::string& t : *tokens) {
      std::string out;
      size_t pos = 0;
      for (size_t hit; (hit = t.find(from_, pos)) != std::string::npos; pos = hit + from_.size()) {
        out.append(t, pos, hit - pos);
        out.append(to_);
      }
      out.append(t, pos, std::string::npos);
      t = std::move(out);
    }
  }

 private:
  std::string from_, to_;
};

class Strip : public TokenDecoder {
 public:
  Strip(std::string content, int start, int stop) : content_(std::move(content)), start_(start), stop_(stop) {}
  void decode_chain(std::vector<std::string>* tokens) const override {
    if (content_.empty()) return;
    for (std::string& t : *tokens) {
      for (int k = 0; k < start_ && t.compare(0, content_.size(), content_) == 0; ++k) t.erase(0, content_.size());
      for (int k = 0; k < stop_ && t.size() >= content_.size() &&
                      t.compare(t.size() - content_.size(), content_.size(), content_) == 0;
           ++k) {
        t.erase(t.size() - content_.size());
      }
    }
  }

 private:
  std::string content_;
  int start_, stop_;
};

class Metaspace : public TokenDecoder {
 public:
  Metaspace(std::string replacement, bool strip_first) : replacement_(std::move(replacement)), strip_first_(strip_first) {}
  void decode_chain(std::vector<std::string>* tokens) const override {
    Replace(replacement_, " ").decode_chain(tokens);
    if (strip_first_ && !tokens->empty() && !(*tokens)[0].empty() && (*tokens)[0][0] == ' ') (*tokens)[0].erase(0, 1);
  }

 private:
  std::string replacement_;
  bool strip_first_;
};

class Sequence : public TokenDecoder {
 public:
  explicit Sequence(std::vector<std::unique_ptr<TokenDecoder>> parts) : parts_(std::move(parts)) {}
  void decode_chain(std::vector<std::string>* tokens) const override {
    for (const auto& p : parts_) p->decode_chain(tokens);
  }

 private:
  std::vector<std::unique_ptr<TokenDecoder>> parts_;
};

}  // namespace

StatusOr<std::unique_ptr<TokenDecoder>> parse_decoder(const Json& j, const std::string& where) {
  if (j.is_null()) return std::unique_ptr<TokenDecoder>();
  MOE_ASSIGN_OR_RETURN(std::string type, get_type(j, where));
  if (type == "ByteLevel") return std::unique_ptr<TokenDecoder>(new ByteLevel());
  if (type == "ByteFallback") return std::unique_ptr<TokenDecoder>(new ByteFallback());
  if (type == "Fuse") return std::unique_ptr<TokenDecoder>(new Fuse());
  if (type == "Replace") {
    auto pat = j.find("pattern");
    if (pat == j.end() || !pat->is_object() || !pat->contains("String") || !(*pat)["String"].is_string()) {
      return bad(field(where, "pattern"), "only {\"String\": ...} patterns are supported in a Replace decoder");
    }
    MOE_ASSIGN_OR_RETURN(std::string content, get_string(j, "content", where));
    return std::unique_ptr<TokenDecoder>(new Replace((*pat)["String"].get<std::string>(), content));
  }
  if (type == "Strip") {
    MOE_ASSIGN_OR_RETURN(std::string content, get_string(j, "content", where, " "));
    const int start = j.value("start", 0), stop = j.value("stop", 0);
    return std::unique_ptr<TokenDecoder>(new Strip(content, start, stop));
  }
  if (type == "Metaspace") {
    MOE_ASSIGN_OR_RETURN(std::string replacement, get_string(j, "replacement", where, "\xE2\x96\x81"));
    MOE_ASSIGN_OR_RETURN(std::string scheme, get_string(j, "prepend_scheme", where, "always"));
    MOE_ASSIGN_OR_RETURN(bool add_prefix_space, get_bool(j, "add_prefix_space", where, true));
    const bool strip_first = j.contains("prepend_scheme") ? scheme != "never" : add_prefix_space;
    return std::unique_ptr<TokenDecoder>(new Metaspace(replacement, strip_first));
  }
  if (type == "Sequence") {
    MOE_ASSIGN_OR_RETURN(const Json* list, get_array(j, "decoders", where));
    std::vector<std::unique_ptr<TokenDecoder>> parts;
    for (size_t i = 0; i < list->size(); ++i) {
      MOE_ASSIGN_OR_RETURN(auto p, parse_decoder((*list)[i], item(field(where, "decoders"), i)));
      if (p) parts.push_back(std::move(p));
    }
    return std::unique_ptr<TokenDecoder>(new Sequence(std::move(parts)));
  }
  return bad(field(where, "type"), "unsupported decoder type \"" + type +
                                       "\" (supported: ByteLevel, ByteFallback, Fuse, Replace, Strip, Metaspace, "
                                       "Sequence)");
}

}  // namespace moe::hf
