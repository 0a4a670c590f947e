#include "moe/constrain/json_grammar.h"

#include <functional>

namespace moe {
namespace {

JsonNode literal(std::string text) {
  JsonNode n;
  n.kind = JsonNodeKind::kLiteral;
  n.text = std::move(text);
  return n;
}

JsonNode of_kind(JsonNodeKind kind) {
  JsonNode n;
  n.kind = kind;
  return n;
}

}  // namespace

int add_any_value(JsonGrammar& g) {
  const int any = g.add(of_kind(JsonNodeKind::kUnion));
  JsonNode object = of_kind(JsonNodeKind::kObject);
  object.additional = any;
  JsonNode array = of_kind(JsonNodeKind::kArray);
  array.items = any;
  std::vector<int> alts = {g.add(std::move(object)), g.add(std::move(array)), g.add(of_kind(JsonNodeKind::kString)),
                           g.add(of_kind(JsonNodeKind::kNumber)), g.add(literal("true")), g.add(literal("false")),
                           g.add(literal("null"))};
  g.nodes[static_cast<size_t>(any)].alternatives = std::move(alts);
  return any;
}

Status finalize_json_grammar(JsonGrammar& g, const std::string& what) {
  const size_t n = g.nodes.size();
  if (g.root < 0 || static_cast<size_t>(g.root) >= n) return internal_error(what + ": grammar without a root");
  g.string_node = -1;
  for (size_t i = 0; i < n; ++i) {
    if (g.nodes[i].kind == JsonNodeKind::kString) g.string_node = static_cast<int>(i);
  }
  if (g.string_node < 0) g.string_node = g.add(of_kind(JsonNodeKind::kString));
  const size_t total = g.nodes.size();
  g.leaves.assign(total, {});
  g.next_required.assign(total, {});
  // 0 = not visited, 1 = in progress, 2 = done.
  std::vector<uint8_t> mark(total, 0);
  std::function<Status(int)> flatten = [&](int id) -> Status {
    const size_t i = static_cast<size_t>(id);
    if (mark[i] == 2) return ok_status();
    if (mark[i] == 1) return invalid_argument(what + ": a $ref cycle that never reaches an object or array");
    mark[i] = 1;
    const JsonNode& node = g.nodes[i];
    std::vector<int> leaves;
    if (node.kind != JsonNodeKind::kUnion) {
      leaves.push_back(id);
    } else {
      for (int alt : node.alternatives) {
        MOE_RETURN_IF_ERROR(flatten(alt));
        for (int leaf : g.leaves[static_cast<size_t>(alt)]) {
          bool seen = false;
          for (int l : leaves) seen = seen || l == leaf;
          if (!seen) leaves.push_back(leaf);
        }
      }
      if (leaves.empty()) return invalid_argument(what + ": a union (anyOf, enum or type list) with no alternative");
    }
    g.leaves[i] = std::move(leaves);
    mark[i] = 2;
    return ok_status();
  };
  for (size_t i = 0; i < total; ++i) MOE_RETURN_IF_ERROR(flatten(static_cast<int>(i)));
  for (size_t i = 0; i < total; ++i) {
    const JsonNode& node = g.nodes[i];
    if (node.kind != JsonNodeKind::kObject) continue;
    const int np = static_cast<int>(node.properties.size());
    std::vector<int> next(static_cast<size_t>(np) + 1, np);
    for (int p = np - 1; p >= 0; --p) {
      next[static_cast<size_t>(p)] = node.properties[static_cast<size_t>(p)].required ? p : next[static_cast<size_t>(p) + 1];
    }
    g.next_required[i] = std::move(next);
  }
  return ok_status();
}

JsonGrammar json_object_grammar() {
  JsonGrammar g;
  const int any = add_any_value(g);
  JsonNode object = of_kind(JsonNodeKind::kObject);
  object.additional = any;
  g.root = g.add(std::move(object));
  const Status st = finalize_json_grammar(g, "json_object");
  (void)st;  // a fixed grammar: cannot fail
  return g;
}

JsonGrammar json_value_grammar() {
  JsonGrammar g;
  g.root = add_any_value(g);
  const Status st = finalize_json_grammar(g, "json value");
  (void)st;
  return g;
}

}  // namespace moe
