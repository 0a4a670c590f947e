// Chat templates: a conversation (OpenAI `messages`) rendered into the prompt text the
// model was trained on, ending with the cue for the assistant's turn.
//
// Built in:
//   chatml   (Qwen)     <|im_start|>{role}\n{content}<|im_end|>\n ... <|im_start|>assistant\n
//   mistral  (Mixtral-Instruct) [INST] {user} [/INST]{assistant}</s>[INST] ... [/INST]
//            system messages are prepended to the first user turn ("{system}\n\n{user}");
//            user and assistant turns must alternate, starting with user. No "<s>": the
//            tokenizer adds BOS.
//   plain    (base models) every message's content joined by "\n\n", no role markers:
//            a chat of one user message is the completion of that text.
//
// A template file (JSON) describes a turn-by-turn template:
//   {
//     "prefix":            "text once at the start" (optional, default ""),
//     "system":            "...{content}..." (optional; without it system messages are
//                          prepended to the next user message as "{system}\n\n{user}"),
//     "user":              "...{content}...",
//     "assistant":         "...{content}...",
//     "generation_prompt": "text that cues the assistant's turn" (optional, default "")
//   }
// Each message becomes its role's string with every "{content}" replaced by the text.
// All functions are thread-safe (a ChatTemplate is immutable).
#pragma once

#include <string>
#include <vector>

#include "moe/serve/openai_protocol.h"
#include "moe/status.h"

namespace moe::serve {

class ChatTemplate {
 public:
  // The plain template.
  ChatTemplate();
  // "chatml", "mistral" or "plain"; InvalidArgument naming the known ones otherwise.
  static StatusOr<ChatTemplate> builtin(const std::string& name);
  // A template file in the format above. NotFound / InvalidArgument naming the file
  // and field.
  static StatusOr<ChatTemplate> from_file(const std::string& path);
  // `name_or_path` (a built-in name, else a file) when not empty; otherwise from
  // `<model_dir>/tokenizer_config.json`'s chat_template (a Jinja text containing
  // "<|im_start|>" -> chatml, "[INST]" -> mistral), else by `model_type` (qwen2_moe,
  // qwen3_moe -> chatml), else plain. A tokenizer_config.json that cannot be read is
  // ignored (logged); a bad `name_or_path` is an error.
  static StatusOr<ChatTemplate> select(const std::string& name_or_path, const std::string& model_dir,
                                       const std::string& model_type);

  // The built-in name, or the file path.
  const std::string& name() const { return name_; }
  // The prompt text for `messages` (non-empty). InvalidArgument (param "messages") when
  // the conversation does not fit the template (mistral: roles must alternate).
  StatusOr<std::string> render(const std::vector<ChatMessage>& messages) const;

 private:
  enum class Kind { kPlain, kChatml, kMistral, kFile };
  Kind kind_ = Kind::kPlain;
  std::string name_ = "plain";
  // kFile only.
  std::string prefix_, system_, user_, assistant_, generation_prompt_;
  bool has_system_ = false;
};

}  // namespace moe::serve
