#include "moe/model/tokenizer.h"

#include <sys/stat.h>

#include <algorithm>

#include <nlohmann/json.hpp>
#include <sentencepiece_processor.h>

#include "moe/core/mapped_file.h"
#include "moe/model/hf/hf_tokenizer.h"

namespace moe {

Tokenizer::Tokenizer() : sp_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {}
Tokenizer::~Tokenizer() = default;

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::from_bytes(const std::string& model_blob,
                                                           const std::string& model_path,
                                                           const std::string* config_text,
                                                           const std::string& config_path) {
  std::unique_ptr<Tokenizer> tok(new Tokenizer());
  auto st = tok->sp_->LoadFromSerializedProto(model_blob);
  if (!st.ok()) return data_loss(model_path + ": not a valid SentencePiece model (" + st.ToString() + ")");
  if (config_text != nullptr) {
    auto j = nlohmann::json::parse(*config_text, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) return data_loss(config_path + ": not a valid JSON object");
    if (j.contains("add_bos_token") && j["add_bos_token"].is_boolean()) tok->add_bos_ = j["add_bos_token"];
    if (j.contains("add_eos_token") && j["add_eos_token"].is_boolean()) tok->add_eos_ = j["add_eos_token"];
  }
  for (int id = 0; id < tok->sp_->GetPieceSize(); ++id) {
    if (tok->sp_->IsControl(id) || tok->sp_->IsUnknown(id)) {
      const std::string piece = tok->sp_->IdToPiece(id);
      if (!piece.empty()) tok->sp_specials_.emplace_back(piece, id);
    }
  }
  std::stable_sort(tok->sp_specials_.begin(), tok->sp_specials_.end(),
                   [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
  return tok;
}

namespace {

bool file_exists(const std::string& path) {
  struct stat sb {};
  return ::stat(path.c_str(), &sb) == 0;
}

// Reads `name` through `source`; *found false (and OK) when it is absent.
StatusOr<std::string> read_optional(const ModelSource& source, const std::string& name, bool* found) {
  auto r = source.read_file(name);
  *found = r.ok();
  if (!r.ok() && r.status().code() == StatusCode::kNotFound) return std::string();
  return r;
}

}  // namespace

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::load(const std::string& dir) {
  const std::string json_path = dir + "/tokenizer.json";
  const std::string model_path = dir + "/tokenizer.model";
  const std::string config_path = dir + "/tokenizer_config.json";
  std::string config;
  const bool has_config = file_exists(config_path);
  if (has_config) {
    MOE_ASSIGN_OR_RETURN(config, read_text_file(config_path));
  }
  if (file_exists(json_path)) {
    MOE_ASSIGN_OR_RETURN(std::string text, read_text_file(json_path));
    std::unique_ptr<Tokenizer> tok(new Tokenizer());
    MOE_ASSIGN_OR_RETURN(tok->hf_, hf::HfTokenizer::parse(text, json_path, has_config ? &config : nullptr, config_path));
    return tok;
  }
  if (!file_exists(model_path)) {
    return not_found(dir + ": no tokenizer: neither tokenizer.json nor tokenizer.model is there");
  }
  MOE_ASSIGN_OR_RETURN(std::string blob, read_text_file(model_path));
  return from_bytes(blob, model_path, has_config ? &config : nullptr, config_path);
}

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::load(const ModelSource& source) {
  const std::string json_path = source.location() + "/tokenizer.json";
  const std::string model_path = source.location() + "/tokenizer.model";
  const std::string config_path = source.location() + "/tokenizer_config.json";
  bool has_config = false, has_json = false, has_model = false;
  MOE_ASSIGN_OR_RETURN(std::string config, read_optional(source, "tokenizer_config.json", &has_config));
  MOE_ASSIGN_OR_RETURN(std::string text, read_optional(source, "tokenizer.json", &has_json));
  if (has_json) {
    std::unique_ptr<Tokenizer> tok(new Tokenizer());
    MOE_ASSIGN_OR_RETURN(tok->hf_, hf::HfTokenizer::parse(text, json_path, has_config ? &config : nullptr, config_path));
    return tok;
  }
  MOE_ASSIGN_OR_RETURN(std::string blob, read_optional(source, "tokenizer.model", &has_model));
  if (!has_model) {
    return not_found(source.location() + ": no tokenizer: neither tokenizer.json nor tokenizer.model is there");
  }
  return from_bytes(blob, model_path, has_config ? &config : nullptr, config_path);
}

std::vector<int> Tokenizer::sp_encode(const std::string& text) const {
  std::vector<int> ids;
  size_t emitted = 0;
  auto flush_text = [&](size_t end) {
    if (end <= emitted) return;
    std::vector<int> part;
    sp_->Encode(text.substr(emitted, end - emitted), &part).IgnoreError();  // never fails on a loaded model
    ids.insert(ids.end(), part.begin(), part.end());
  };
  for (size_t pos = 0; pos < text.size() && !sp_specials_.empty();) {
    const std::pair<std::string, int>* hit = nullptr;
    for (const auto& s : sp_specials_) {
      if (text.compare(pos, s.first.size(), s.first) == 0) {
        hit = &s;
        break;
      }
    }
    if (hit == nullptr) {
      ++pos;
      continue;
    }
    flush_text(pos);
    ids.push_back(hit->second);
    pos += hit->first.size();
    emitted = pos;
  }
  flush_text(text.size());
  return ids;
}

std::vector<int> Tokenizer::encode(const std::string& text) const { return encode(text, true); }

std::vector<int> Tokenizer::encode(const std::string& text, bool add_special_tokens) const {
  if (hf_) return hf_->encode(text, add_special_tokens);
  std::vector<int> ids = sp_encode(text);
  if (add_special_tokens && add_bos_ && bos_id() >= 0) ids.insert(ids.begin(), bos_id());
  if (add_special_tokens && add_eos_ && eos_id() >= 0) ids.push_back(eos_id());
  return ids;
}

std::string Tokenizer::token_bytes(int id) const {
  if (hf_) return hf_->token_bytes(id);
  if (id < 0 || id >= vocab_size() || is_special(id)) return {};
  if (sp_->IsByte(id)) {
    // "<0xAB>"
    const std::string piece = sp_->IdToPiece(id);
    return std::string(1, static_cast<char>(std::stoi(piece.substr(3, 2), nullptr, 16)));
  }
  std::string piece = sp_->IdToPiece(id);
  static constexpr char kSpace[] = "\xE2\x96\x81";  // U+2581, SentencePiece's space
  std::string out;
  for (size_t i = 0; i < piece.size();) {
    if (piece.compare(i, 3, kSpace) == 0) {
      out.push_back(' ');
      i += 3;
    } else {
      out.push_back(piece[i++]);
    }
  }
  return out;
}

bool Tokenizer::is_special(int id) const {
  if (hf_) return hf_->is_special(id);
  if (id < 0 || id >= vocab_size()) return false;
  return sp_->IsControl(id) || sp_->IsUnknown(id);
}

int Tokenizer::token_to_id(const std::string& piece) const {
  if (hf_) return hf_->token_to_id(piece);
  const int id = sp_->PieceToId(piece);
  // PieceToId answers unk_id for an unknown piece.
  if (id == sp_->unk_id() && piece != sp_->IdToPiece(id)) return -1;
  return id;
}

std::string Tokenizer::decode(const std::vector<int>& ids) const {
  if (hf_) return hf_->decode(ids);
  std::vector<int> valid;
  valid.reserve(ids.size());
  for (int id : ids) {
    if (id >= 0 && id < vocab_size()) valid.push_back(id);
  }
  std::string out;
  sp_->Decode(valid, &out).IgnoreError();
  return out;
}

int Tokenizer::vocab_size() const { return hf_ ? hf_->vocab_size() : sp_->GetPieceSize(); }
int Tokenizer::bos_id() const { return hf_ ? hf_->bos_id() : sp_->bos_id(); }
int Tokenizer::eos_id() const { return hf_ ? hf_->eos_id() : sp_->eos_id(); }
bool Tokenizer::add_bos() const { return hf_ ? hf_->add_bos() : add_bos_; }

}  // namespace moe
