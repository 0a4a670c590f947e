#include "moe/model/tokenizer.h"

#include <sys/stat.h>

#include <nlohmann/json.hpp>
#include <sentencepiece_processor.h>

#include "moe/core/mapped_file.h"

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
  return tok;
}

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::load(const std::string& dir) {
  const std::string model_path = dir + "/tokenizer.model";
  MOE_ASSIGN_OR_RETURN(std::string blob, read_text_file(model_path));
  const std::string config_path = dir + "/tokenizer_config.json";
  struct stat sb {};
  if (::stat(config_path.c_str(), &sb) != 0) return from_bytes(blob, model_path, nullptr, config_path);
  MOE_ASSIGN_OR_RETURN(std::string text, read_text_file(config_path));
  return from_bytes(blob, model_path, &text, config_path);
}

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::load(const ModelSource& source) {
  const std::string model_path = source.location() + "/tokenizer.model";
  const std::string config_path = source.location() + "/tokenizer_config.json";
  MOE_ASSIGN_OR_RETURN(std::string blob, source.read_file("tokenizer.model"));
  auto config = source.read_file("tokenizer_config.json");
  if (!config.ok()) {
    if (config.status().code() != StatusCode::kNotFound) return config.status();
    return from_bytes(blob, model_path, nullptr, config_path);
  }
  return from_bytes(blob, model_path, &config.value(), config_path);
}

std::vector<int> Tokenizer::encode(const std::string& text) const {
  std::vector<int> ids;
  sp_->Encode(text, &ids).IgnoreError();  // never fails on a loaded model
  if (add_bos_ && bos_id() >= 0) ids.insert(ids.begin(), bos_id());
  if (add_eos_ && eos_id() >= 0) ids.push_back(eos_id());
  return ids;
}

std::vector<int> Tokenizer::encode(const std::string& text, bool add_special_tokens) const {
  if (add_special_tokens) return encode(text);
  std::vector<int> ids;
  sp_->Encode(text, &ids).IgnoreError();
  return ids;
}

std::string Tokenizer::token_bytes(int id) const {
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
  if (id < 0 || id >= vocab_size()) return false;
  return sp_->IsControl(id) || sp_->IsUnknown(id);
}

int Tokenizer::token_to_id(const std::string& piece) const {
  const int id = sp_->PieceToId(piece);
  // PieceToId answers unk_id for an unknown piece.
  if (id == sp_->unk_id() && piece != sp_->IdToPiece(id)) return -1;
  return id;
}

std::string Tokenizer::decode(const std::vector<int>& ids) const {
  std::vector<int> valid;
  valid.reserve(ids.size());
  for (int id : ids) {
    if (id >= 0 && id < vocab_size()) valid.push_back(id);
  }
  std::string out;
  sp_->Decode(valid, &out).IgnoreError();
  return out;
}

int Tokenizer::vocab_size() const { return sp_->GetPieceSize(); }
int Tokenizer::bos_id() const { return sp_->bos_id(); }
int Tokenizer::eos_id() const { return sp_->eos_id(); }

}  // namespace moe
