// Compiles OpenAI's response_format (SeqRequest::response_format / json_schema,
// include/moe/generation_service.h) into a JsonGrammar (json_grammar.h).
//
// The JSON Schema subset:
//   type (object, array, string, number, integer, boolean, null, or a list of them);
//   properties, required, additionalProperties (false, true, or a schema when there are
//   no properties); items (a schema), minItems, maxItems; enum, const; anyOf; $ref to
//   a local "#/..." pointer (e.g. #/$defs/X, recursion allowed); and the annotations
//   title, description, default, examples, $schema, $id, $comment, deprecated,
//   readOnly, writeOnly, $defs, definitions.
// Generated objects hold only the listed properties, in schema order, each optional
// one possibly left out; numbers of type integer have no fraction or exponent.
// Any other keyword (pattern, format, minLength, oneOf, allOf, ...) is refused with
// InvalidArgument "response_format.json_schema: unsupported keyword 'pattern' at
// #/properties/x", never ignored; so are schemas past the limits below, by name.
#pragma once

#include <memory>
#include <string>

#include "moe/constrain/json_grammar.h"
#include "moe/status.h"

namespace moe {

inline constexpr int kMaxSchemaNodes = 4096;      // grammar nodes per schema
inline constexpr int kMaxSchemaProperties = 128;  // properties per object
inline constexpr int kMaxEnumValues = 256;        // values per enum
inline constexpr size_t kMaxLiteralBytes = 4096;  // one enum/const value as JSON text

// InvalidArgument naming the keyword and its place in the schema (a JSON pointer).
StatusOr<JsonGrammar> compile_json_schema(const std::string& schema_text);

// "text": nullptr (no constraint); "json_object": any JSON object; "json_schema":
// compile_json_schema(json_schema). InvalidArgument naming response_format for another
// value, a missing schema, or a schema given with another format.
StatusOr<std::shared_ptr<const JsonGrammar>> compile_response_format(const std::string& response_format,
                                                                     const std::string& json_schema);

}  // namespace moe
