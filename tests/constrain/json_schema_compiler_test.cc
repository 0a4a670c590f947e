// The JSON Schema subset compiler (src/moe/constrain/json_schema_compiler.h): instances
// accepted by the compiled grammar against a Python validator of the subset (written
// from the spec; python3-jsonschema is not installed), completions of accepted prefixes
// conform, and every refusal names the keyword or limit and where it is.
#include "moe/constrain/json_schema_compiler.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "json_reference.h"

namespace moe {
namespace {

using testing::accepts;
using testing::complete_greedily;
using testing::python_verdicts;

struct SchemaCase {
  std::string schema;
  std::vector<std::string> instances;  // in schema order (the grammar's canonical order)
};

const std::vector<SchemaCase> kCases = {
    {R"({"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
        "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 2}},
        "required": ["name", "tags"], "additionalProperties": false})",
     {R"({"name":"x","tags":["a"]})", R"({ "name": "x", "age": 3, "tags": ["a", "b"] })", R"({"tags":["a"]})",
      R"({"name":"x","tags":[]})", R"({"name":"x","tags":["a","b","c"]})", R"({"name":1,"tags":["a"]})",
      R"({"name":"x","age":1.5,"tags":["a"]})", R"({"name":"x","tags":["a"],"extra":1})", R"({"name":"x","age":-0,"tags":["a"]})",
      R"({"name":"x"})", "[]", "{}"}},
    {R"({"enum": ["red", "green", 1, null, {"a": [1]}]})",
     {"\"red\"", "\"gre\"", "\"green\"", "1", "null", R"({"a":[1]})", "2", "\"blue\"", "10", "true"}},
    {R"({"type": ["string", "null"]})", {"\"x\"", "null", "1", "[]"}},
    {R"({"anyOf": [{"type": "object", "properties": {"kind": {"const": "a"}, "x": {"type": "number"}}, "required": ["kind", "x"]},
                   {"type": "object", "properties": {"kind": {"const": "b"}, "y": {"type": "boolean"}}, "required": ["kind"]}]})",
     {R"({"kind":"a","x":1.5})", R"({"kind":"b"})", R"({"kind":"b","y":true})", R"({"kind":"a"})", R"({"kind":"c"})",
      R"({"kind":"a","y":true})", R"({"kind":"b","y":1})"}},
    {R"({"$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer"},
        "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}}, "required": ["v"], "additionalProperties": false}},
        "$ref": "#/$defs/node"})",
     {R"({"v":1})", R"({"v":1,"kids":[{"v":2,"kids":[]}]})", R"({"v":1,"kids":[{}]})", R"({"kids":[]})",
      R"({"v":1,"kids":[{"v":2,"kids":[{"v":3}]}]})"}},
    {R"({"type": "object"})", {R"({"a":[1,{"b":null}]})", "[]", "{}", R"({"":""})"}},
    {R"({"type": "array", "items": {"type": "number"}, "maxItems": 0})", {"[]", "[1]", "[ ]"}},
    {R"({"type": "integer"})", {"12", "-3", "1.5", "\"1\"", "0"}},
    {R"({"type": "boolean", "title": "flag", "description": "annotations are accepted"})", {"true", "false", "1"}},
    {"true", {"1", "{}", "\"s\"", "[1,"}},
    {R"({"type": "object", "properties": {"a/b": {"type": "string"}, "q\"": {"type": "null"}}})",
     {R"({"a/b":"x"})", R"({"q\"":null})", R"({"a/b":"x","q\"":null})", R"({"a/b":null})", "{}"}},
    {R"({"type": "object", "additionalProperties": {"type": "integer"}})", {R"({"a":1,"b":2})", R"({"a":"x"})", "{}"}},
};

class SchemaTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::make_temp_dir("json_schema"); }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

TEST_F(SchemaTest, InstancesMatchAPythonValidator) {
  std::vector<std::pair<std::string, std::string>> cases;
  std::vector<bool> mine;
  for (const SchemaCase& c : kCases) {
    auto g = compile_json_schema(c.schema);
    ASSERT_TRUE(g.ok()) << g.status().message() << "\n" << c.schema;
    for (const std::string& inst : c.instances) {
      cases.emplace_back(inst, c.schema);
      mine.push_back(accepts(*g, inst));
    }
  }
  const std::vector<int> ref = python_verdicts(dir_, cases);
  ASSERT_EQ(ref.size(), cases.size());
  int valid = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    EXPECT_EQ(mine[i], ref[i] == 1) << cases[i].second << "\ninstance " << cases[i].first;
    valid += ref[i];
  }
  EXPECT_GT(valid, 20);  // both kinds
  EXPECT_LT(valid, static_cast<int>(cases.size()) - 20);
}

TEST_F(SchemaTest, AcceptedPrefixesCompleteToConformingInstances) {
  std::vector<std::pair<std::string, std::string>> done;
  for (const SchemaCase& c : kCases) {
    auto g = compile_json_schema(c.schema);
    ASSERT_TRUE(g.ok()) << g.status().message();
    for (const std::string& inst : c.instances) {
      for (size_t cut = 0; cut <= inst.size(); ++cut) {
        JsonState s(&*g);
        if (!s.advance(inst.substr(0, cut))) break;
        std::string out;
        ASSERT_TRUE(complete_greedily(*g, inst.substr(0, cut), &out)) << c.schema << "\nprefix " << inst.substr(0, cut);
        done.emplace_back(out, c.schema);
      }
    }
  }
  ASSERT_GT(done.size(), 300u);
  const std::vector<int> ref = python_verdicts(dir_, done);
  for (size_t i = 0; i < done.size(); ++i) EXPECT_EQ(ref[i], 1) << done[i].second << "\ncompletion " << done[i].first;
}

TEST(SchemaTestPlain, PropertiesFollowTheSchemaTextOrder) {
  auto g = compile_json_schema(R"({"type":"object","properties":{"zeta":{"type":"null"},"alpha":{"type":"null"}},
                                   "required":["zeta","alpha"]})");
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_TRUE(accepts(*g, R"({"zeta":null,"alpha":null})"));
  EXPECT_FALSE(accepts(*g, R"({"alpha":null,"zeta":null})"));  // documented: schema order only
}

void expect_refused(const std::string& schema, const std::string& message) {
  auto g = compile_json_schema(schema);
  ASSERT_FALSE(g.ok()) << schema;
  EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument) << schema;
  EXPECT_NE(g.status().message().find("response_format.json_schema: "), std::string::npos) << g.status().message();
  EXPECT_NE(g.status().message().find(message), std::string::npos) << g.status().message() << "\nwanted: " << message;
}

TEST(SchemaRefusals, UnsupportedKeywordsAreNamedWithTheirPlace) {
  expect_refused(R"({"type":"string","pattern":"a+"})", "unsupported keyword 'pattern' at #");
  expect_refused(R"({"type":"object","properties":{"x":{"type":"string","format":"date"}}})",
                 "unsupported keyword 'format' at #/properties/x");
  expect_refused(R"({"type":"object","properties":{"a/b":{"minLength":1}}})",
                 "unsupported keyword 'minLength' at #/properties/a~1b");
  expect_refused(R"({"type":"array","items":{"oneOf":[{"type":"null"}]}})", "unsupported keyword 'oneOf' at #/items");
  expect_refused(R"({"allOf":[{"type":"null"}]})", "unsupported keyword 'allOf' at #");
  expect_refused(R"({"type":"object","patternProperties":{"^a":{}}})", "unsupported keyword 'patternProperties' at #");
  expect_refused(R"({"anyOf":[{"type":"null"},{"type":"number","minimum":0}]})",
                 "unsupported keyword 'minimum' at #/anyOf/1");
  expect_refused(R"({"type":"array","prefixItems":[]})", "unsupported keyword 'prefixItems' at #");
}

TEST(SchemaRefusals, MalformedSchemas) {
  expect_refused("{not json", "not valid JSON");
  expect_refused("false", "the schema false");
  expect_refused("[1]", "a schema must be an object or a boolean at #");
  expect_refused(R"({"type":"foo"})", "unknown type \"foo\" at #");
  expect_refused(R"({"type":5})", "'type' must be a string");
  expect_refused(R"({"$ref":"http://example.com/s.json"})", "is not local");
  expect_refused(R"({"$ref":"#/$defs/missing"})", "points to nothing");
  expect_refused(R"({"$defs":{"a":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"})", "$ref cycle");
  expect_refused(R"({"type":"array","minItems":3,"maxItems":2})", "'minItems' (3) > 'maxItems' (2) at #");
  expect_refused(R"({"type":"array","minItems":-1})", "'minItems' must be a non-negative integer at #");
  expect_refused(R"({"type":"object","properties":{"a":{}},"required":["b"]})", "required property 'b' is not in 'properties' at #");
  expect_refused(R"({"enum":[]})", "'enum' must be a non-empty array at #");
  expect_refused(R"({"type":"string","enum":[1,2]})", "no 'enum' value has the schema's type at #");
  expect_refused(R"({"enum":[1],"const":1})", "both 'enum' and 'const'");
  expect_refused(R"({"type":"object","properties":{"a":{}},"additionalProperties":{"type":"null"}})",
                 "'additionalProperties' as a schema together with 'properties' is not supported at #");
  expect_refused(R"({"type":"array","items":[{"type":"null"}]})", "'items' as a list (tuple validation) is not supported");
  expect_refused(R"({"type":"string","properties":{}})", "keyword 'properties' at # but 'type' has no object");
  expect_refused(R"({"type":"object","anyOf":[{"type":"object"}]})", "keyword 'type' together with 'anyOf'");
  expect_refused(R"({"enum":[1],"items":{}})", "keyword 'items' together with 'enum'");
  expect_refused(R"({"anyOf":[]})", "'anyOf' must be a non-empty array at #");
}

TEST(SchemaRefusals, TooComplexSchemasNameTheLimit) {
  std::string values;
  for (int i = 0; i <= kMaxEnumValues; ++i) values += (i ? "," : "") + std::to_string(i);
  expect_refused(R"({"enum":[)" + values + "]}", "more than 256 (the limit) at #");
  std::string props;
  for (int i = 0; i <= kMaxSchemaProperties; ++i) props += (i ? ",\"p" : "\"p") + std::to_string(i) + "\":{}";
  expect_refused(R"({"type":"object","properties":{)" + props + "}}", "more than 128 (the limit) at #");
  std::string deep = R"({"type":"null"})";
  for (int i = 0; i <= kMaxJsonDepth; ++i) deep = R"({"type":"array","items":)" + deep + "}";
  expect_refused(deep, "nested deeper than 32 (the limit) at #/items/items");
  std::string alts;
  for (int i = 0; i <= kMaxSchemaNodes; ++i) alts += std::string(i ? "," : "") + R"({"type":"string"})";
  expect_refused(R"({"anyOf":[)" + alts + "]}", "too complex: more than 4096 grammar nodes (the limit) at #/anyOf/");
  expect_refused(R"({"const":")" + std::string(kMaxLiteralBytes, 'x') + "\"}", "more than 4096 (the limit) at #");
}

TEST(ResponseFormat, FormatsAndTheirErrors) {
  auto text = compile_response_format("text", "");
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, nullptr);
  auto object = compile_response_format("json_object", "");
  ASSERT_TRUE(object.ok());
  ASSERT_NE(*object, nullptr);
  EXPECT_TRUE(accepts(**object, "{\"a\":[1]}"));
  EXPECT_FALSE(accepts(**object, "[1]"));
  auto schema = compile_response_format("json_schema", R"({"type":"integer"})");
  ASSERT_TRUE(schema.ok());
  EXPECT_TRUE(accepts(**schema, "7"));
  for (const auto& [format, schema_text, message] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"xml", "", "response_format must be \"text\", \"json_object\" or \"json_schema\" (got \"xml\")"},
           {"json_schema", "", "response_format.json_schema: missing"},
           {"json_object", "{}", "response_format.json_schema given with response_format \"json_object\""},
           {"json_schema", R"({"format":"email"})", "unsupported keyword 'format' at #"}}) {
    auto r = compile_response_format(format, schema_text);
    ASSERT_FALSE(r.ok()) << format;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(message), std::string::npos) << r.status().message();
  }
}

}  // namespace
}  // namespace moe
