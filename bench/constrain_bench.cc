// The per-token cost of JSON-constrained decoding (src/moe/constrain/): the mask of one
// step (JsonConstraint::mask_logits: the trie walk plus -inf over the logits) and the
// accept of the chosen token, over a JSON document tokenized by greedy longest match.
// Vocabularies: the tiny model's (2048, SentencePiece) and synthetic byte-level ones of
// 32k and 150k tokens (all 256 bytes, words with and without a leading space, numbers,
// JSON punctuation runs, indentation, CJK and emoji pieces, partial UTF-8), since real
// tokenizer files cannot be downloaded here. docs/performance.md has the figures.
//
//   ./build/bench/constrain_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only
#include <benchmark/benchmark.h>

#include <random>
#include <set>

#include "moe/constrain/json_constraint.h"
#include "moe/constrain/json_schema_compiler.h"
#include "moe/engine.h"
#include "moe/model/tokenizer.h"

namespace moe {
namespace {

std::vector<std::string> synthetic_vocab(size_t n) {
  std::mt19937 rng(14);
  std::set<std::string> seen;
  std::vector<std::string> v = {"</s>"};  // id 0: EOS (empty bytes below)
  auto add = [&](const std::string& t) {
    if (v.size() < n && !t.empty() && seen.insert(t).second) v.push_back(t);
  };
  for (int b = 0; b < 256; ++b) add(std::string(1, static_cast<char>(b)));
  for (const char* t : {"{\"", "\":", "\": \"", "\",", "\", \"", "\"}", "},", "}]", "[{", "\n", "\n  ", "\n    ", "  ",
                        "    ", "true", "false", "null", "\\n", "\\\"", "\\u00"}) {
    add(t);
  }
  const std::string cjk[] = {"\xe4\xb8\xad", "\xe6\x96\x87", "\xe5\xad\x97", "\xf0\x9f\x98\x80", "\xc3\xa9"};
  std::uniform_int_distribution<int> len(2, 9), letter(0, 25), kind(0, 19), digit(0, 9);
  while (v.size() < n) {
    const int k = kind(rng);
    std::string t;
    if (k < 14) {  // a word piece, often with a leading space, sometimes capitalized
      if (k < 8) t += ' ';
      const int l = len(rng);
      for (int i = 0; i < l; ++i) t += static_cast<char>((i == 0 && k % 5 == 0 ? 'A' : 'a') + letter(rng));
    } else if (k < 16) {  // numbers
      const int l = len(rng) / 2 + 1;
      for (int i = 0; i < l; ++i) t += static_cast<char>('0' + digit(rng));
    } else if (k < 18) {  // CJK / emoji runs and partial UTF-8
      const int l = len(rng) / 3 + 1;
      for (int i = 0; i < l; ++i) t += cjk[static_cast<size_t>(digit(rng)) % 5];
      if (k == 17) t.pop_back();
    } else {  // punctuation with a word: ", and" / "\":" / ".\n"
      const char* p[] = {",", ".", "\":", "\"", "(", ")", ";", "!"};
      t = std::string(p[digit(rng) % 8]) + (k == 18 ? " " : "");
      for (int i = 0; i < len(rng) / 2; ++i) t += static_cast<char>('a' + letter(rng));
    }
    add(t);
  }
  v[0].clear();  // the EOS id has no bytes
  return v;
}

std::vector<std::string> tiny_vocab() {
  auto tok = Tokenizer::load(std::string(MOE_SOURCE_DIR) + "/models/tiny-mixtral-shakespeare");
  if (!tok.ok()) return {};
  std::vector<std::string> v(static_cast<size_t>((*tok)->vocab_size()));
  for (int id = 0; id < (*tok)->vocab_size(); ++id) {
    if (!(*tok)->is_special(id)) v[static_cast<size_t>(id)] = (*tok)->token_bytes(id);
  }
  return v;
}

// Greedy longest-match tokenization of `text` over the vocabulary's trie.
std::vector<int> tokenize(const ConstraintVocab& v, const std::string& text) {
  std::vector<int> ids;
  size_t i = 0;
  while (i < text.size()) {
    uint32_t node = 0;
    int best = -1;
    size_t best_len = 0;
    for (size_t j = i; j < text.size(); ++j) {
      const ByteTrie::Node& n = v.all.nodes[node];
      uint32_t next = UINT32_MAX;
      for (uint32_t e = n.edge_begin; e < n.edge_end; ++e) {
        if (v.all.edge_byte[e] == static_cast<uint8_t>(text[j])) next = v.all.edge_child[e];
      }
      if (next == UINT32_MAX) break;
      node = next;
      const ByteTrie::Node& c = v.all.nodes[node];
      if (c.tok_end > c.tok_begin) best = v.all.tokens[c.tok_begin], best_len = j - i + 1;
    }
    if (best < 0) return {};  // a byte the vocabulary lacks
    ids.push_back(best);
    i += best_len;
  }
  return ids;
}

// One line, one space after ':' and ',' (the grammar allows one whitespace byte per gap).
const char* kDocument =
    R"({"name": "Romeo Montague", "age": 17, "lines": ["But soft, what light through yonder window breaks?", )"
    R"("It is the east, and Juliet is the sun."], "house": {"city": "Verona", "rival": "Capulet", "members": 12, )"
    R"("score": -3.25e2}, "tags": ["lover", "\u00e9t\u00e9", "\u4e2d\u6587"], "alive": false, "note": null})";

void run(benchmark::State& state, const std::vector<std::string>& bytes, const std::string& schema) {
  if (bytes.empty()) {
    state.SkipWithError("vocabulary not available");
    return;
  }
  std::vector<int> eos;
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (bytes[i].empty()) {
      eos.push_back(static_cast<int>(i));
      break;
    }
  }
  auto vocab = std::make_shared<const ConstraintVocab>(ConstraintVocab::build(bytes, eos));
  auto grammar = compile_response_format(schema.empty() ? "json_object" : "json_schema", schema);
  if (!grammar.ok()) {
    state.SkipWithError(grammar.status().message().c_str());
    return;
  }
  const std::vector<int> doc = tokenize(*vocab, kDocument);
  if (doc.empty()) {
    state.SkipWithError("the document has a byte the vocabulary lacks");
    return;
  }
  std::vector<float> logits(bytes.size(), 0.0f);
  int64_t tokens = 0;
  for (auto _ : state) {
    JsonConstraint c(*grammar, vocab);
    for (int t : doc) {
      c.mask_logits(logits.data(), static_cast<int>(logits.size()));
      if (!c.accept(t)) {
        state.SkipWithError("the document's tokens were refused");
        return;
      }
    }
    tokens += static_cast<int64_t>(doc.size());
    benchmark::DoNotOptimize(logits.data());
  }
  state.counters["ns_per_token"] =
      benchmark::Counter(static_cast<double>(tokens), benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  state.counters["doc_tokens"] = static_cast<double>(doc.size());
  state.counters["trie_nodes"] = static_cast<double>(vocab->all.nodes.size());
}

const char* kSchema = R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"},
  "lines":{"type":"array","items":{"type":"string"}},"house":{"type":"object","properties":{"city":{"type":"string"},
  "rival":{"enum":["Capulet","Montague"]},"members":{"type":"integer"},"score":{"type":"number"}}},
  "tags":{"type":"array","items":{"type":"string"}},"alive":{"type":"boolean"},"note":{"type":["null","string"]}},
  "required":["name","age"]})";

void BM_JsonObjectTiny(benchmark::State& s) { run(s, tiny_vocab(), ""); }
void BM_JsonObject32k(benchmark::State& s) { run(s, synthetic_vocab(32000), ""); }
void BM_JsonObject150k(benchmark::State& s) { run(s, synthetic_vocab(150000), ""); }
void BM_JsonSchemaTiny(benchmark::State& s) { run(s, tiny_vocab(), kSchema); }
void BM_JsonSchema32k(benchmark::State& s) { run(s, synthetic_vocab(32000), kSchema); }
void BM_JsonSchema150k(benchmark::State& s) { run(s, synthetic_vocab(150000), kSchema); }
// The denominator: one decode step of the tiny model (Engine::generate, greedy, 64
// tokens after a short prompt, 1 thread).
void BM_TinyModelDecodeStep(benchmark::State& state) {
  EngineOptions o;
  o.model_dir = std::string(MOE_SOURCE_DIR) + "/models/tiny-mixtral-shakespeare";
  o.num_threads = 1;
  auto engine = Engine::open(o);
  if (!engine.ok()) {
    state.SkipWithError(engine.status().message().c_str());
    return;
  }
  GenerateRequest r;
  r.prompt = "ROMEO:\nWhat say you?";
  r.max_tokens = 64;
  r.ignore_eos = true;
  int64_t tokens = 0;
  for (auto _ : state) {
    auto out = (*engine)->generate(r);
    if (!out.ok()) {
      state.SkipWithError(out.status().message().c_str());
      return;
    }
    tokens += static_cast<int64_t>(out->output_token_ids.size());
  }
  // CPU time per generated token, the short prompt's prefill included (as the mask's
  // figures are CPU time: the machine is shared).
  state.counters["ns_per_token"] =
      benchmark::Counter(static_cast<double>(tokens), benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_TinyModelDecodeStep)->Unit(benchmark::kMillisecond);

BENCHMARK(BM_JsonObjectTiny)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_JsonObject32k)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_JsonObject150k)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_JsonSchemaTiny)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_JsonSchema32k)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_JsonSchema150k)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace moe

BENCHMARK_MAIN();
