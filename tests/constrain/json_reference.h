// Helpers of the constrain tests: /usr/bin/python3 as the independent reference (its
// json module for JSON validity; a small validator of the schema subset written from
// the JSON Schema spec), and a completion of an accepted prefix by the recogniser.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "moe/constrain/json_state.h"
#include "test_util.h"

namespace moe::testing {

inline std::string to_hex(const std::string& bytes) {
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out += kHex[c >> 4];
    out += kHex[c & 15];
  }
  return out;
}

inline std::string from_hex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) out += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  return out;
}

// The reference script: `label FILE [SCHEMA_FILE]` prints one 0/1 per hex line of FILE
// (valid JSON, and an instance of the schema when given); `gen SEED N` prints N lines
// "<hex>" of random JSON texts, some mutated.
inline const char* kReferencePy = R"PY(
import json, random, re, sys

def bad_constant(x):
    raise ValueError(x)

def parse(b):
    try:
        return True, json.loads(b.decode('utf-8'), parse_constant=bad_constant)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return False, None

TYPES = {'object': lambda v: isinstance(v, dict), 'array': lambda v: isinstance(v, list),
         'string': lambda v: isinstance(v, str), 'boolean': lambda v: isinstance(v, bool),
         'null': lambda v: v is None,
         'number': lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
         'integer': lambda v: (isinstance(v, int) and not isinstance(v, bool)) or (isinstance(v, float) and v.is_integer())}

def resolve(root, ref):
    node = root
    for part in ref[2:].split('/') if ref != '#' else []:
        node = node[part.replace('~1', '/').replace('~0', '~')]
    return node

def same(a, b):
    return type(a) == type(b) and a == b if not isinstance(a, (int, float)) or isinstance(a, bool) else (not isinstance(b, bool) and isinstance(b, (int, float)) and a == b)

def valid(v, s, root):
    if s is True: return True
    if s is False: return False
    if '$ref' in s: return valid(v, resolve(root, s['$ref']), root)
    if 'anyOf' in s and not any(valid(v, a, root) for a in s['anyOf']): return False
    if 'enum' in s and not any(same(v, e) for e in s['enum']): return False
    if 'const' in s and not same(v, s['const']): return False
    if 'type' in s:
        ts = s['type'] if isinstance(s['type'], list) else [s['type']]
        if not any(TYPES[t](v) for t in ts): return False
    if isinstance(v, dict):
        props = s.get('properties', {})
        for r in s.get('required', []):
            if r not in v: return False
        for k, x in v.items():
            if k in props:
                if not valid(x, props[k], root): return False
            elif 'additionalProperties' in s and not valid(x, s['additionalProperties'], root):
                return False
    if isinstance(v, list):
        if len(v) < s.get('minItems', 0) or len(v) > s.get('maxItems', 1 << 62): return False
        if 'items' in s and not all(valid(x, s['items'], root) for x in v): return False
    return True

POOL = ['a', 'Z', ' ', '"', '\\', '\n', '/', '\u00e9', '\u4e2d', '\U0001F600', '\u0001', '\u007f', 'x']

def rand_str(r):
    return ''.join(r.choice(POOL) for _ in range(r.randint(0, 5)))

def rand_val(r, d):
    x = r.random()
    if d < 4 and x < 0.2: return {rand_str(r): rand_val(r, d + 1) for _ in range(r.randint(0, 3))}
    if d < 4 and x < 0.4: return [rand_val(r, d + 1) for _ in range(r.randint(0, 3))]
    return r.choice([rand_str(r), r.randint(-10**6, 10**6), r.uniform(-1e6, 1e6), r.uniform(-1e-6, 1e-6),
                     0, -0.0, 1e21, True, False, None])

def gen(seed, n):
    r = random.Random(seed)
    edits = list(b'{}[]",:0123456789-+.eEtfnu\\ \n') + [0xc3, 0xa9, 0xff, 0x80, 0xed, 0xa0, 0x01]
    for _ in range(n):
        v = rand_val(r, 0)
        text = json.dumps(v, ensure_ascii=r.choice([True, False]), indent=r.choice([None, 0]),
                          separators=r.choice([None, (',', ':'), (', ', ': ')])).encode('utf-8')
        k = r.random()
        if k < 0.6 and text:
            i = r.randrange(len(text))
            op = r.randrange(4)
            if op == 0: text = text[:i] + text[i + 1:]
            elif op == 1: text = text[:i] + bytes([r.choice(edits)]) + text[i:]
            elif op == 2: text = text[:i] + bytes([r.choice(edits)]) + text[i + 1:]
            else: text = text[:i]
        if not text or text[-1:] in (b' ', b'\n', b'\t', b'\r') or re.search(rb'[ \t\n\r]{2}', text):
            continue  # trailing whitespace, runs of two: documented deviations, tested by hand
        print(text.hex())

if sys.argv[1] == 'gen':
    gen(int(sys.argv[2]), int(sys.argv[3]))
else:
    schema = json.load(open(sys.argv[3])) if len(sys.argv) > 3 else None
    for line in open(sys.argv[2]):
        parts = line.split()
        ok, v = parse(bytes.fromhex(parts[0]) if parts else b'')
        s = json.loads(bytes.fromhex(parts[1])) if len(parts) > 1 else schema
        print(1 if ok and (s is None or valid(v, s, s)) else 0)
)PY";

// Runs the reference script; returns its stdout lines (fails the test on error).
inline std::vector<std::string> run_reference(const std::string& dir, const std::string& args) {
  const std::string script = dir + "/reference.py";
  write_file(script, kReferencePy);
  const CommandResult r = run_command("/usr/bin/python3 " + script + " " + args);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t i = 0; i <= r.output.size(); ++i) {
    if (i == r.output.size() || r.output[i] == '\n') {
      if (i > start) lines.push_back(r.output.substr(start, i - start));
      start = i + 1;
    }
  }
  return lines;
}

// 1/0 per text: python's verdict (valid JSON; an instance of `schema` when non-empty).
inline std::vector<int> python_verdicts(const std::string& dir, const std::vector<std::string>& texts,
                                        const std::string& schema = "") {
  std::string hex;
  for (const std::string& t : texts) hex += to_hex(t) + "\n";
  write_file(dir + "/cases.hex", hex);
  std::string args = "label " + dir + "/cases.hex";
  if (!schema.empty()) {
    write_file(dir + "/schema.json", schema);
    args += " " + dir + "/schema.json";
  }
  std::vector<int> out;
  for (const std::string& line : run_reference(dir, args)) out.push_back(line == "1" ? 1 : 0);
  EXPECT_EQ(out.size(), texts.size());
  return out;
}

// Python's verdict on each (text, schema) pair in one run.
inline std::vector<int> python_verdicts(const std::string& dir,
                                        const std::vector<std::pair<std::string, std::string>>& cases) {
  std::string lines;
  for (const auto& [text, schema] : cases) lines += to_hex(text) + " " + to_hex(schema) + "\n";
  write_file(dir + "/cases.hex", lines);
  std::vector<int> out;
  for (const std::string& line : run_reference(dir, "label " + dir + "/cases.hex")) out.push_back(line == "1" ? 1 : 0);
  EXPECT_EQ(out.size(), cases.size());
  return out;
}

// The recogniser's verdict: every byte accepted and the value complete at the end.
inline bool accepts(const JsonGrammar& g, const std::string& text) {
  JsonState s(&g);
  return s.advance(text) && s.complete();
}

// Completes an accepted prefix greedily (closing bytes first, then any byte that keeps
// the state alive); empty + failure if no completion within `limit` bytes.
inline bool complete_greedily(const JsonGrammar& g, const std::string& prefix, std::string* out, int limit = 400) {
  JsonState s(&g);
  if (!s.advance(prefix)) return false;
  *out = prefix;
  const std::string priority = "\"}]0:,";
  for (int n = 0; n < limit; ++n) {
    if (s.complete()) return true;
    bool moved = false;
    for (int pass = 0; pass < 2 && !moved; ++pass) {
      for (int i = 0; i < (pass == 0 ? static_cast<int>(priority.size()) : 256) && !moved; ++i) {
        const char c = pass == 0 ? priority[static_cast<size_t>(i)] : static_cast<char>(i);
        if (pass == 1 && (c == ' ' || c == '\n' || c == '\t' || c == '\r')) continue;
        JsonState t = s;
        if (t.advance(std::string(1, c))) {
          s = t;
          *out += c;
          moved = true;
        }
      }
    }
    if (!moved) return false;
  }
  return s.complete();
}

}  // namespace moe::testing
