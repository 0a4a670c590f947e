// JsonState: where a byte-level JSON recogniser (a pushdown automaton over a
// JsonGrammar, json_grammar.h) stands after some bytes. Copyable and cheap to copy: a
// few small frames per stack. It answers "can this byte come next" (step) and "may the
// value end here" (complete).
//
// Nondeterminism (a union whose alternatives start alike, e.g. enum strings or optional
// object keys) is kept as a set of stacks, at most kMaxJsonStacks; a stack that cannot
// continue is dropped. Every stack kept can still reach a complete value, so whatever
// the set accepts can be completed.
//
// Not thread-safe (scratch space inside); the grammar must outlive the state.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "moe/constrain/json_grammar.h"

namespace moe {

inline constexpr int kMaxJsonStacks = 256;

struct JsonFrame {
  int32_t node = -1;  // index in grammar.nodes; -1 = the root frame
  uint8_t phase = 0;  // kind-specific (json_state.cc)
  uint8_t ws = 0;     // whitespace bytes in the current run
  uint16_t pad = 0;
  int32_t a = 0;      // kind-specific counters
  int32_t b = 0;
  bool operator==(const JsonFrame&) const = default;
};

class JsonState {
 public:
  // Before the first byte. `grammar` is finalized and outlives the state.
  explicit JsonState(const JsonGrammar* grammar);

  // Writes into `to` the state after `byte`; false (and `to` unspecified) if the
  // byte cannot come next. `to` may not be `from`.
  static bool step(const JsonState& from, uint8_t byte, JsonState* to);
  // In place; false (state unchanged) if some byte cannot come next.
  bool advance(std::string_view bytes);

  // The input may end here: a whole value has been read (a number may still grow).
  bool complete() const;
  // Complete and no byte may follow (a closed object, string or literal at top level).
  bool closed() const;
  // One stack, inside a string between characters: every byte sequence that is valid
  // UTF-8 without '"', '\\' and control characters keeps the state as it is.
  bool in_plain_string() const;
  int stacks() const { return static_cast<int>(ends_.size()); }

 private:
  void push_stack(const std::vector<JsonFrame>& frames);
  void feed(size_t begin, size_t end, uint8_t byte, JsonState* to) const;
  void dedupe();

  const JsonGrammar* g_;
  std::vector<JsonFrame> frames_;  // the stacks, one after the other
  std::vector<uint32_t> ends_;     // end offset of each stack in frames_
  mutable std::vector<JsonFrame> scratch_;
};

}  // namespace moe
