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
// A Jinja template (HF's chat_template; the subset of src/moe/jinja/) is rendered with
// messages (role, content), add_generation_prompt = true, bos_token and eos_token (from
// tokenizer_config.json) and raise_exception(). Such a prompt carries its special tokens
// as text ("<s>", "<|im_start|>"), so it must be tokenized without adding BOS again
// (renders_special_tokens(); vLLM: add_special_tokens=False for chat).
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

#include <memory>
#include <string>
#include <vector>

#include "moe/serve/openai_protocol.h"
#include "moe/status.h"

namespace moe::jinja {
class Template;
}

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
  // A Jinja template text; `name` names it in messages. InvalidArgument naming the
  // unsupported feature (tag, filter, test, method, function) or syntax and its line.
  static StatusOr<ChatTemplate> from_jinja(const std::string& text, const std::string& name,
                                           const std::string& bos_token, const std::string& eos_token);
  // `name_or_path` when not empty: a built-in name, else a file: "*.json" (or any text
  // that parses as a JSON object) in the format above, otherwise a Jinja template whose
  // bos/eos tokens come from `<model_dir>/tokenizer_config.json`. Otherwise that file's
  // chat_template (a string, or a list of {name, template}: "default", else the first)
  // rendered as Jinja; without one, by `model_type` (qwen2_moe, qwen3_moe -> chatml),
  // else plain. A tokenizer_config.json that cannot be read is ignored (logged); a bad
  // `name_or_path` or a chat_template the Jinja subset cannot run is an error (at
  // server start-up, never a wrong prompt later).
  static StatusOr<ChatTemplate> select(const std::string& name_or_path, const std::string& model_dir,
                                       const std::string& model_type);

  // The built-in name, or the file path (for a tokenizer_config.json template, that file).
  const std::string& name() const { return name_; }
  // True for a Jinja template: the prompt holds BOS and the other special tokens as text;
  // tokenize it with add_special_tokens = false.
  bool renders_special_tokens() const { return kind_ == Kind::kJinja; }
  // The prompt text for `messages` (non-empty). InvalidArgument (param "messages") when
  // the conversation does not fit the template (mistral: roles must alternate; Jinja:
  // raise_exception(), or a runtime error, with its message).
  StatusOr<std::string> render(const std::vector<ChatMessage>& messages) const;

 private:
  enum class Kind { kPlain, kChatml, kMistral, kFile, kJinja };
  Kind kind_ = Kind::kPlain;
  std::string name_ = "plain";
  // kFile only.
  std::string prefix_, system_, user_, assistant_, generation_prompt_;
  bool has_system_ = false;
  // kJinja only.
  std::shared_ptr<const jinja::Template> jinja_;
  std::string bos_token_, eos_token_;
};

}  // namespace moe::serve
