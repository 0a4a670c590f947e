// A compiled JSON grammar: the nodes that JsonState (json_state.h) runs byte by byte.
// Built by json_object_grammar() (any JSON object, OpenAI's response_format
// json_object) or compile_json_schema() (json_schema_compiler.h). Plain data,
// immutable once finalized; shared read-only between sequences and threads.
//
// Output rules, the same for every grammar:
//   - strict JSON (RFC 8259): strings with valid UTF-8 (RFC 3629) and escapes, numbers,
//     the literals true/false/null; NaN/Infinity are not JSON;
//   - whitespace: at most kMaxWhitespaceRun byte (space, tab, CR or LF) between two
//     tokens and before the value, none after the top-level value (it ends the output),
//     as Outlines' default: a model cannot spend its tokens on whitespace (a sampled
//     small model otherwise pads every gap), at the price of no indented output;
//   - numbers at most kMaxNumberBytes bytes;
//   - at most kMaxJsonDepth nested objects/arrays.
#pragma once

#include <climits>
#include <cstdint>
#include <string>
#include <vector>

#include "moe/status.h"

namespace moe {

inline constexpr int kMaxWhitespaceRun = 1;
inline constexpr int kMaxNumberBytes = 32;
inline constexpr int kMaxJsonDepth = 32;      // nested objects/arrays

enum class JsonNodeKind : uint8_t {
  kObject,   // '{' ... '}'
  kArray,    // '[' ... ']'
  kString,   // any string
  kNumber,   // any number
  kInteger,  // -?(0|[1-9][0-9]*)
  kLiteral,  // exactly `text` (true, null, an enum value, an object key "\"name\"")
  kUnion,    // any of `alternatives` (a type list, anyOf, enum, a $ref)
};

struct JsonProperty {
  int key = -1;    // a kLiteral node: the key as JSON text, e.g. "\"name\""
  int value = -1;  // the value's node
  bool required = false;
};

struct JsonNode {
  JsonNodeKind kind = JsonNodeKind::kUnion;
  // kObject: either `properties` (emitted in this order, optional ones may be left out,
  // no other key) or, with no properties, `additional` >= 0: any string keys with values
  // of that node (-1 and no properties: only {}).
  std::vector<JsonProperty> properties{};
  int additional = -1;
  // kArray: items of node `items`, their count in [min_items, max_items].
  int items = -1;
  int min_items = 0;
  int max_items = INT_MAX;
  // kLiteral: the exact bytes; `property` = index in its object when it is a key.
  std::string text{};
  int property = -1;
  // kUnion
  std::vector<int> alternatives{};
};

struct JsonGrammar {
  std::vector<JsonNode> nodes;
  int root = -1;
  int string_node = -1;  // a kString node (generic object keys); set by finalize
  // Filled by finalize_json_grammar():
  // leaves[n]: the non-union nodes a value of node n can start as (unions flattened).
  std::vector<std::vector<int>> leaves{};
  // next_required[n][i] (objects): the first required property index >= i, or
  // properties.size() when none; size properties.size() + 1.
  std::vector<std::vector<int>> next_required{};

  int add(JsonNode node) {
    nodes.push_back(std::move(node));
    return static_cast<int>(nodes.size()) - 1;
  }
};

// Computes `leaves`, `next_required` and `string_node`. InvalidArgument when a union
// reaches itself through unions only (a $ref cycle that never emits a byte) or has no
// leaves. `what` prefixes messages.
Status finalize_json_grammar(JsonGrammar& grammar, const std::string& what);

// Adds a node accepting any JSON value (nesting bounded by kMaxJsonDepth) and returns it.
int add_any_value(JsonGrammar& grammar);

// Any JSON object (response_format json_object), finalized.
JsonGrammar json_object_grammar();
// Any JSON value, finalized (tests, and the schema `true`).
JsonGrammar json_value_grammar();

}  // namespace moe
