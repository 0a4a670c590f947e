// Server-Sent Events, as OpenAI-compatible servers stream completions: an
// incremental parser (bytes may arrive split anywhere, even inside "\r\n") and the
// decoding of one `data:` payload of /v1/completions or /v1/chat/completions.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "moe/status.h"

namespace moe::serve_bench {

// The event stream format of the WHATWG HTML spec, reduced to what a client of an
// OpenAI stream needs: lines end in "\n", "\r\n" or "\r"; "data:" lines (one leading
// space dropped) accumulate, joined by "\n"; a blank line dispatches the event;
// comments (":...") and the other fields (event, id, retry) are ignored.
class SseParser {
 public:
  using EventFn = std::function<void(std::string_view data)>;

  // Parses `bytes`, calling `on_event` for every event completed in them.
  void feed(std::string_view bytes, const EventFn& on_event);
  // End of stream: dispatches a last event that was not followed by a blank line
  // (some servers omit the final one). Resets the parser.
  void finish(const EventFn& on_event);

 private:
  void process_line(std::string_view line, const EventFn& on_event);

  std::string line_;         // the incomplete line so far
  std::string data_;         // data of the event being built
  bool has_data_ = false;
  bool skip_lf_ = false;     // the previous byte was '\r': a following '\n' is part of it
};

// One decoded payload of an OpenAI stream.
struct StreamChunk {
  bool done = false;              // the "[DONE]" sentinel
  bool has_choices = false;       // a non-empty "choices" array
  std::string text;               // choices[0].text, or choices[0].delta.content (chat)
  std::string finish_reason;      // choices[0].finish_reason when set
  std::optional<int> prompt_tokens;      // usage.prompt_tokens
  std::optional<int> completion_tokens;  // usage.completion_tokens
  std::optional<int> cached_tokens;      // usage.prompt_tokens_details.cached_tokens
  std::string error;              // an {"error": ...} payload: its message
};

// An OpenAI `usage` object: prompt_tokens, completion_tokens and the prompt tokens the
// server's prefix cache supplied, prompt_tokens_details.cached_tokens (OpenAI's and
// vLLM's field). A field that is missing, null or not a non-negative integer is
// nullopt (prompt_tokens_details is null when a server's prefix caching is off).
struct Usage {
  std::optional<int> prompt_tokens;
  std::optional<int> completion_tokens;
  std::optional<int> cached_tokens;
};
Usage parse_usage(const nlohmann::json& usage);

// Decodes one event's data. `chat`: a /v1/chat/completions stream (delta.content)
// instead of /v1/completions (text). InvalidArgument if the payload is not JSON.
StatusOr<StreamChunk> parse_stream_chunk(std::string_view data, bool chat);

}  // namespace moe::serve_bench
