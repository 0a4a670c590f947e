#include "moe/model/hf/pre_tokenizer.h"

#include <algorithm>
#include <functional>
#include <utility>

#include "moe/model/hf/regex.h"
#include "moe/model/hf/utf8_util.h"

namespace moe::hf {
namespace {

enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// GPT-2's pre-tokenizer regex (ByteLevel use_regex).
constexpr char kGpt2Regex[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

using Span = std::pair<size_t, size_t>;

// Splits `text` at the `matches` per `behavior`, as Hugging Face's
// NormalizedString::split does; appends the non-empty pieces to `out`.
void split_by(const std::string& text, const std::vector<Span>& matches, Behavior behavior, bool invert,
              std::vector<std::string>* out) {
  // (span, is_delimiter) in order, gaps included.
  std::vector<std::pair<Span, bool>> parts;
  size_t prev = 0;
  for (const Span& m : matches) {
    if (m.first > prev) parts.push_back({{prev, m.first}, invert});
    parts.push_back({m, !invert});
    prev = m.second;
  }
  if (prev < text.size()) parts.push_back({{prev, text.size()}, invert});

  std::vector<Span> spans;
  switch (behavior) {
    case Behavior::kIsolated:
      for (const auto& p : parts) spans.push_back(p.first);
      break;
    case Behavior::kRemoved:
      for (const auto& p : parts) {
        if (!p.second) spans.push_back(p.first);
      }
      break;
    case Behavior::kMergedWithPrevious: {
      bool previous_match = false;
      for (const auto& [span, is_match] : parts) {
        if (is_match && !previous_match && !spans.empty()) {
          spans.back().second = span.second;
        } else {
          spans.push_back(span);
        }
        previous_match = is_match;
      }
      break;
    }
    case Behavior::kMergedWithNext: {
      bool previous_match = false;
      for (size_t k = parts.size(); k-- > 0;) {
        const auto& [span, is_match] = parts[k];
        if (is_match && !previous_match && !spans.empty()) {
          spans.back().first = span.first;
        } else {
          spans.push_back(span);
        }
        previous_match = is_match;
      }
      std::reverse(spans.begin(), spans.end());
      break;
    }
    case Behavior::kContiguous: {
      bool previous_match = false;
      for (size_t k = 0; k < parts.size(); ++k) {
        const auto& [span, is_match] = parts[k];
        if (k > 0 && is_match == previous_match) {
          spans.back().second = span.second;
        } else {
          spans.push_back(span);
        }
        previous_match = is_match;
      }
      break;
    }
  }
  for (const Span& s : spans) {
    if (s.second > s.first) out->push_back(text.substr(s.first, s.second - s.first));
  }
}

void for_each_piece(std::vector<std::string>* pieces,
                    const std::function<void(const std::string&, std::vector<std::string>*)>& f) {
  std::vector<std::string> out;
  out.reserve(pieces->size());
  for (const std::string& p : *pieces) f(p, &out);
  *pieces = std::move(out);
}

class Split : public PreTokenizer {
 public:
  Split(std::unique_ptr<Regex> re, std::string literal, Behavior b, bool invert)
      : re_(std::move(re)), literal_(std::move(literal)), behavior_(b), invert_(invert) {}
  void apply(std::vector<std::string>* pieces) const override {
    for_each_piece(pieces, [&](const std::string& p, std::vector<std::string>* out) {
      std::vector<Span> matches;
      if (re_) {
        matches = re_->find_all(p);
      } else if (!literal_.empty()) {
        for (size_t hit = p.find(literal_); hit != std::string::npos; hit = p.find(literal_, hit + literal_.size())) {
          matches.push_back({hit, hit + literal_.size()});
        }
      }
      split_by(p, matches, behavior_, invert_, out);
    });
  }

 private:
  std::unique_ptr<Regex> re_;
  std::string literal_;
  Behavior behavior_;
  bool invert_;
};

class ByteLevel : public PreTokenizer {
 public:
  ByteLevel(bool add_prefix_space, std::unique_ptr<Regex> re) : add_prefix_space_(add_prefix_space), re_(std::move(re)) {}
  void apply(std::vector<std::string>* pieces) const override {
    for_each_piece(pieces, [&](const std::string& p, std::vector<std::string>* out) {
      std::string text = (add_prefix_space_ && !p.empty() && p[0] != ' ') ? " " + p : p;
      if (!re_) {
        if (!text.empty()) out->push_back(byte_level_encode(text));
        return;
      }
      std::vector<std::string> split;
      split_by(text, re_->find_all(text), Behavior::kIsolated, false, &split);
      for (const std::string& s : split) out->push_back(byte_level_encode(s));
    });
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<Regex> re_;
};

class Digits : public PreTokenizer {
 public:
  explicit Digits(bool individual) : individual_(individual) {}
  void apply(std::vector<std::string>* pieces) const override {
    for_each_piece(pieces, [&](const std::string& p, std::vector<std::string>* out) {
      // \p{Nd} runs, as HF's Digits (char::is_numeric is wider; ASCII covers the families here).
      std::vector<Span> matches;
      for (size_t i = 0; i < p.size(); ++i) {
        if (p[i] >= '0' && p[i] <= '9') matches.push_back({i, i + 1});
      }
      split_by(p, matches, individual_ ? Behavior::kIsolated : Behavior::kContiguous, false, out);
    });
  }

 private:
  bool individual_;
};

class Sequence : public PreTokenizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<PreTokenizer>> parts) : parts_(std::move(parts)) {}
  void apply(std::vector<std::string>* pieces) const override {
    for (const auto& p : parts_) p->apply(pieces);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> parts_;
};

StatusOr<Behavior> parse_behavior(const Json& j, const std::string& where) {
  MOE_ASSIGN_OR_RETURN(std::string b, get_string(j, "behavior", where, "Removed"));
  if (b == "Removed") return Behavior::kRemoved;
  if (b == "Isolated") return Behavior::kIsolated;
  if (b == "MergedWithPrevious") return Behavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return Behavior::kMergedWithNext;
  if (b == "Contiguous") return Behavior::kContiguous;
  return bad(field(where, "behavior"), "unknown split behavior \"" + b + "\"");
}

}  // namespace

StatusOr<std::unique_ptr<PreTokenizer>> parse_pre_tokenizer(const Json& j, const std::string& where) {
  if (j.is_null()) return std::unique_ptr<PreTokenizer>();
  MOE_ASSIGN_OR_RETURN(std::string type, get_type(j, where));
  if (type == "Split") {
    MOE_ASSIGN_OR_RETURN(Behavior b, parse_behavior(j, where));
    MOE_ASSIGN_OR_RETURN(bool invert, get_bool(j, "invert", where, false));
    auto pat = j.find("pattern");
    const std::string pwhere = field(where, "pattern");
    if (pat == j.end() || !pat->is_object()) return bad(pwhere, "expected {\"Regex\": ...} or {\"String\": ...}");
    if (pat->contains("Regex") && (*pat)["Regex"].is_string()) {
      auto re = Regex::compile((*pat)["Regex"].get<std::string>());
      if (!re.ok()) return bad(field(pwhere, "Regex"), re.status().message());
      return std::unique_ptr<PreTokenizer>(new Split(std::move(re).value(), {}, b, invert));
    }
    if (pat->contains("String") && (*pat)["String"].is_string()) {
      return std::unique_ptr<PreTokenizer>(new Split(nullptr, (*pat)["String"].get<std::string>(), b, invert));
    }
    return bad(pwhere, "expected {\"Regex\": ...} or {\"String\": ...}");
  }
  if (type == "ByteLevel") {
    MOE_ASSIGN_OR_RETURN(bool prefix, get_bool(j, "add_prefix_space", where, true));
    MOE_ASSIGN_OR_RETURN(bool use_regex, get_bool(j, "use_regex", where, true));
    std::unique_ptr<Regex> re;
    if (use_regex) {
      auto compiled = Regex::compile(kGpt2Regex);
      if (!compiled.ok()) return compiled.status();
      re = std::move(compiled).value();
    }
    return std::unique_ptr<PreTokenizer>(new ByteLevel(prefix, std::move(re)));
  }
  if (type == "Digits") {
    MOE_ASSIGN_OR_RETURN(bool individual, get_bool(j, "individual_digits", where, false));
    return std::unique_ptr<PreTokenizer>(new Digits(individual));
  }
  if (type == "Sequence") {
    MOE_ASSIGN_OR_RETURN(const Json* list, get_array(j, "pretokenizers", where));
    std::vector<std::unique_ptr<PreTokenizer>> parts;
    for (size_t i = 0; i < list->size(); ++i) {
      MOE_ASSIGN_OR_RETURN(auto p, parse_pre_tokenizer((*list)[i], item(field(where, "pretokenizers"), i)));
      if (p) parts.push_back(std::move(p));
    }
    return std::unique_ptr<PreTokenizer>(new Sequence(std::move(parts)));
  }
  return bad(field(where, "type"),
             "unsupported pre-tokenizer type \"" + type + "\" (supported: Split, ByteLevel, Digits, Sequence)");
}

}  // namespace moe::hf
