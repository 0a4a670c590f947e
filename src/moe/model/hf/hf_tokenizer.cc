#include "moe/model/hf/hf_tokenizer.h"

#include <algorithm>

#include "moe/model/hf/utf8_util.h"

namespace moe::hf {
namespace {

// tokenizer_config.json's bos_token / eos_token: a string or {"content": ...}.
std::string special_token_text(const Json& config, const char* key) {
  auto it = config.find(key);
  if (it == config.end()) return {};
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) return (*it)["content"];
  return {};
}

StatusOr<AddedToken> parse_added_token(const Json& j, const std::string& where, int id) {
  if (!j.is_object()) return bad(where, "expected an object");
  AddedToken t;
  t.id = id;
  if (id < 0) {
    auto it = j.find("id");
    if (it == j.end() || !it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > (1 << 24)) {
      return bad(field(where, "id"), "expected a non-negative integer");
    }
    t.id = it->get<int>();
  }
  MOE_ASSIGN_OR_RETURN(t.content, get_string(j, "content", where));
  if (t.content.empty()) return bad(field(where, "content"), "missing or empty");
  MOE_ASSIGN_OR_RETURN(t.special, get_bool(j, "special", where, false));
  MOE_ASSIGN_OR_RETURN(t.lstrip, get_bool(j, "lstrip", where, false));
  MOE_ASSIGN_OR_RETURN(t.rstrip, get_bool(j, "rstrip", where, false));
  MOE_ASSIGN_OR_RETURN(t.single_word, get_bool(j, "single_word", where, false));
  MOE_ASSIGN_OR_RETURN(t.normalized, get_bool(j, "normalized", where, !t.special));
  return t;
}

}  // namespace

StatusOr<std::unique_ptr<HfTokenizer>> HfTokenizer::parse(const std::string& json_text, const std::string& json_path,
                                                          const std::string* config_text,
                                                          const std::string& config_path) {
  Json j = Json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return data_loss(json_path + ": not a valid JSON object");
  Json config = Json::object();
  if (config_text != nullptr) {
    config = Json::parse(*config_text, nullptr, /*allow_exceptions=*/false);
    if (config.is_discarded() || !config.is_object()) return data_loss(config_path + ": not a valid JSON object");
  }
  const std::string w = json_path + ": ";
  std::unique_ptr<HfTokenizer> tok(new HfTokenizer());
  if (!j.contains("model")) return data_loss(w + "model: missing");
  MOE_ASSIGN_OR_RETURN(tok->model_, BpeModel::parse(j["model"], w + "model"));
  MOE_ASSIGN_OR_RETURN(tok->normalizer_, parse_normalizer(j.value("normalizer", Json()), w + "normalizer"));
  MOE_ASSIGN_OR_RETURN(tok->pre_tokenizer_, parse_pre_tokenizer(j.value("pre_tokenizer", Json()), w + "pre_tokenizer"));
  MOE_ASSIGN_OR_RETURN(tok->decoder_, parse_decoder(j.value("decoder", Json()), w + "decoder"));

  // Added tokens: tokenizer.json's, then tokenizer_config.json's added_tokens_decoder for
  // ids the first does not list.
  std::vector<AddedToken> added;
  if (j.contains("added_tokens") && !j["added_tokens"].is_null()) {
    MOE_ASSIGN_OR_RETURN(const Json* list, get_array(j, "added_tokens", w.substr(0, w.size() - 2)));
    for (size_t i = 0; i < list->size(); ++i) {
      MOE_ASSIGN_OR_RETURN(AddedToken t, parse_added_token((*list)[i], item(w + "added_tokens", i), -1));
      added.push_back(t);
    }
  }
  if (config.contains("added_tokens_decoder") && config["added_tokens_decoder"].is_object()) {
    for (auto it = config["added_tokens_decoder"].begin(); it != config["added_tokens_decoder"].end(); ++it) {
      const std::string where = config_path + ": added_tokens_decoder." + it.key();
      int id = -1;
      try {
        id = std::stoi(it.key());
      } catch (...) {
      }
      if (id < 0) return data_loss(where + ": the key is not a token id");
      MOE_ASSIGN_OR_RETURN(AddedToken t, parse_added_token(*it, where, id));
      const bool known = std::any_of(added.begin(), added.end(), [&](const AddedToken& a) { return a.id == id; });
      if (!known) added.push_back(t);
    }
  }
  tok->vocab_size_ = tok->model_->size();
  for (const AddedToken& t : added) {
    tok->added_[t.id] = t;
    tok->added_by_content_[t.content] = t.id;
    tok->vocab_size_ = std::max(tok->vocab_size_, t.id + 1);
    if (t.normalized && tok->normalizer_) {
      tok->normalized_matcher_.add(t, tok->normalizer_->normalize(t.content));
    } else if (t.normalized) {
      tok->normalized_matcher_.add(t, t.content);
    } else {
      tok->raw_matcher_.add(t, t.content);
    }
  }
  MOE_RETURN_IF_ERROR(tok->parse_post_processor(j.value("post_processor", Json()), w + "post_processor"));

  tok->bos_id_ = tok->token_to_id(special_token_text(config, "bos_token"));
  tok->eos_id_ = tok->token_to_id(special_token_text(config, "eos_token"));
  // transformers' LlamaTokenizerFast (DeepSeek-V3's class) rebuilds the post-processor
  // from add_bos_token / add_eos_token (defaults true / false) when it loads.
  const std::string cls = config.value("tokenizer_class", "");
  if (cls == "LlamaTokenizerFast" || cls == "LlamaTokenizer") {
    const bool add_bos = config.value("add_bos_token", true);
    const bool add_eos = config.value("add_eos_token", false);
    tok->prefix_ids_.clear();
    tok->suffix_ids_.clear();
    if (add_bos && tok->bos_id_ >= 0) tok->prefix_ids_.push_back(tok->bos_id_);
    if (add_eos && tok->eos_id_ >= 0) tok->suffix_ids_.push_back(tok->eos_id_);
  }
  if (tok->bos_id_ < 0 && !tok->prefix_ids_.empty()) tok->bos_id_ = tok->prefix_ids_.front();
  return tok;
}

Status HfTokenizer::parse_post_processor(const Json& j, const std::string& where) {
  if (j.is_null()) return ok_status();
  MOE_ASSIGN_OR_RETURN(std::string type, get_type(j, where));
  if (type == "ByteLevel") return ok_status();  // only adjusts offsets
  if (type == "Sequence") {
    MOE_ASSIGN_OR_RETURN(const Json* list, get_array(j, "processors", where));
    for (size_t i = 0; i < list->size(); ++i) {
      MOE_RETURN_IF_ERROR(parse_post_processor((*list)[i], item(field(where, "processors"), i)));
    }
    return ok_status();
  }
  if (type == "TemplateProcessing") {
    MOE_ASSIGN_OR_RETURN(const Json* single, get_array(j, "single", where));
    auto specials = j.find("special_tokens");
    bool seen_sequence = false;
    for (size_t i = 0; i < single->size(); ++i) {
      const Json& piece = (*single)[i];
      const std::string pw = item(field(where, "single"), i);
      if (piece.is_object() && piece.contains("Sequence")) {
        if (seen_sequence) return bad(pw, "a second Sequence in the single template");
        seen_sequence = true;
        continue;
      }
      if (!piece.is_object() || !piece.contains("SpecialToken") || !piece["SpecialToken"].is_object() ||
          !piece["SpecialToken"].contains("id") || !piece["SpecialToken"]["id"].is_string()) {
        return bad(pw, "expected {\"Sequence\": ...} or {\"SpecialToken\": {\"id\": ...}}");
      }
      const std::string name = piece["SpecialToken"]["id"];
      if (specials == j.end() || !specials->is_object() || !specials->contains(name) ||
          !(*specials)[name].contains("ids") || !(*specials)[name]["ids"].is_array()) {
        return bad(field(where, "special_tokens"), "no ids for \"" + name + "\"");
      }
      for (const Json& id : (*specials)[name]["ids"]) {
        if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= vocab_size_) {
          return bad(field(field(where, "special_tokens"), name), "id " + id.dump() + " is outside the vocabulary");
        }
        (seen_sequence ? suffix_ids_ : prefix_ids_).push_back(id.get<int>());
      }
    }
    return ok_status();
  }
  return bad(field(where, "type"), "unsupported post-processor type \"" + type +
                                       "\" (supported: TemplateProcessing, ByteLevel, Sequence)");
}

std::vector<int> HfTokenizer::encode(const std::string& input, bool add_special_tokens) const {
  const std::string text = utf8_lossy(input);
  std::vector<int> ids;
  if (add_special_tokens) ids = prefix_ids_;
  std::vector<Segment> raw;
  if (raw_matcher_.empty()) {
    raw.push_back({-1, text});
  } else {
    raw_matcher_.split(text, &raw);
  }
  std::vector<Segment> segs;
  for (Segment& s : raw) {
    if (s.id >= 0) {
      segs.push_back(std::move(s));
      continue;
    }
    std::string normalized = normalizer_ ? normalizer_->normalize(s.text) : std::move(s.text);
    if (normalized_matcher_.empty()) {
      segs.push_back({-1, std::move(normalized)});
    } else {
      normalized_matcher_.split(normalized, &segs);
    }
  }
  std::vector<std::string> pieces;
  for (const Segment& s : segs) {
    if (s.id >= 0) {
      ids.push_back(s.id);
      continue;
    }
    if (s.text.empty()) continue;
    pieces.assign(1, s.text);
    if (pre_tokenizer_) pre_tokenizer_->apply(&pieces);
    for (const std::string& p : pieces) model_->encode_word(p, &ids);
  }
  if (add_special_tokens) ids.insert(ids.end(), suffix_ids_.begin(), suffix_ids_.end());
  return ids;
}

const std::string* HfTokenizer::token_string(int id) const {
  auto it = added_.find(id);
  if (it != added_.end()) return &it->second.content;
  return model_->id_to_token(id);
}

std::string HfTokenizer::decode(const std::vector<int>& ids) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int id : ids) {
    if (is_special(id)) continue;
    const std::string* s = token_string(id);
    if (s != nullptr) tokens.push_back(*s);
  }
  if (decoder_) decoder_->decode_chain(&tokens);
  std::string out;
  for (const std::string& t : tokens) out += t;
  return utf8_lossy(out);
}

std::string HfTokenizer::token_bytes(int id) const {
  if (is_special(id)) return {};
  auto it = added_.find(id);
  if (it != added_.end()) return it->second.content;
  const std::string* s = model_->id_to_token(id);
  if (s == nullptr) return {};
  std::vector<std::string> tokens{*s};
  if (decoder_) decoder_->decode_chain(&tokens);
  std::string out;
  for (const std::string& t : tokens) out += t;
  return out;
}

bool HfTokenizer::is_special(int id) const {
  auto it = added_.find(id);
  return it != added_.end() && it->second.special;
}

int HfTokenizer::token_to_id(const std::string& token) const {
  if (token.empty()) return -1;
  auto it = added_by_content_.find(token);
  if (it != added_by_content_.end()) return it->second;
  return model_->token_to_id(token);
}

}  // namespace moe::hf
