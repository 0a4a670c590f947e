#include "moe/constrain/json_state.h"

#include <cstring>

namespace moe {
namespace {

// Phases per frame kind.
enum RootPhase : uint8_t { kRootValue = 0, kRootDone = 1 };
// Object: a = next property index (schema objects), b = the property of the key just
// read (-1: a generic key).
enum ObjectPhase : uint8_t { kObjOpen = 0, kObjKey = 1, kObjColon = 2, kObjValue = 3, kObjNext = 4 };
// Array: a = items so far.
enum ArrayPhase : uint8_t { kArrOpen = 0, kArrValue = 1, kArrNext = 2 };
// String: kStrHex: a = hex digits left; kStrUtf8: a = continuation bytes left, b = the
// next byte's range (lo | hi << 8).
enum StringPhase : uint8_t { kStrChars = 0, kStrEscape = 1, kStrHex = 2, kStrUtf8 = 3 };
// Number (a = bytes so far).
enum NumberPhase : uint8_t {
  kNumMinus = 0, kNumZero = 1, kNumInt = 2, kNumDot = 3, kNumFrac = 4, kNumE = 5, kNumESign = 6, kNumExp = 7
};

enum class Step : uint8_t {
  kReject,    // the byte cannot come next
  kConsumed,  // taken; the frame goes on
  kDone,      // taken, and it completes the frame (pop it)
  kPass,      // not the frame's, but the frame is complete: pop it, give the byte to its parent
  kValue,     // the frame expects a value and this byte may start one (the node in `value`)
  kKey,       // the frame (an object) expects a key and this byte is '"'
};

bool is_ws(uint8_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool is_digit(uint8_t c) { return c >= '0' && c <= '9'; }
bool is_hex(uint8_t c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

Step whitespace(JsonFrame& f) {
  if (f.ws >= kMaxWhitespaceRun) return Step::kReject;
  ++f.ws;
  return Step::kConsumed;
}

bool number_accepting(uint8_t phase) {
  return phase == kNumZero || phase == kNumInt || phase == kNumFrac || phase == kNumExp;
}

Step step_number(JsonFrame& f, uint8_t c, bool integer) {
  uint8_t next = 255;
  switch (f.phase) {
    case kNumMinus:
      if (c == '0') next = kNumZero;
      else if (is_digit(c)) next = kNumInt;
      break;
    case kNumZero:
    case kNumInt:
      if (f.phase == kNumInt && is_digit(c)) next = kNumInt;
      else if (!integer && c == '.') next = kNumDot;
      else if (!integer && (c == 'e' || c == 'E')) next = kNumE;
      break;
    case kNumDot:
    case kNumFrac:
      if (is_digit(c)) next = kNumFrac;
      else if (f.phase == kNumFrac && (c == 'e' || c == 'E')) next = kNumE;
      break;
    case kNumE:
      if (c == '+' || c == '-') next = kNumESign;
      else if (is_digit(c)) next = kNumExp;
      break;
    default:  // kNumESign, kNumExp
      if (is_digit(c)) next = kNumExp;
      break;
  }
  if (next != 255 && f.a < kMaxNumberBytes) {
    f.phase = next;
    ++f.a;
    return Step::kConsumed;
  }
  return number_accepting(f.phase) ? Step::kPass : Step::kReject;
}

Step step_string(JsonFrame& f, uint8_t c) {
  switch (f.phase) {
    case kStrChars:
      if (c == '"') return Step::kDone;
      if (c == '\\') {
        f.phase = kStrEscape;
        return Step::kConsumed;
      }
      if (c < 0x20) return Step::kReject;
      if (c < 0x80) return Step::kConsumed;
      {
        // RFC 3629: the lead byte fixes the count and the first continuation's range.
        int n = 0, lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF) n = 1;
        else if (c == 0xE0) n = 2, lo = 0xA0;
        else if (c == 0xED) n = 2, hi = 0x9F;
        else if (c >= 0xE1 && c <= 0xEF) n = 2;
        else if (c == 0xF0) n = 3, lo = 0x90;
        else if (c == 0xF4) n = 3, hi = 0x8F;
        else if (c >= 0xF1 && c <= 0xF3) n = 3;
        else return Step::kReject;
        f.phase = kStrUtf8;
        f.a = n;
        f.b = lo | (hi << 8);
        return Step::kConsumed;
      }
    case kStrUtf8:
      if (c < (f.b & 0xFF) || c > (f.b >> 8)) return Step::kReject;
      f.b = 0x80 | (0xBF << 8);
      if (--f.a == 0) f.phase = kStrChars;
      return Step::kConsumed;
    case kStrEscape:
      if (c == 'u') {
        f.phase = kStrHex;
        f.a = 4;
        return Step::kConsumed;
      }
      if (std::strchr("\"\\/bfnrt", c) == nullptr || c == 0) return Step::kReject;
      f.phase = kStrChars;
      return Step::kConsumed;
    default:  // kStrHex
      if (!is_hex(c)) return Step::kReject;
      if (--f.a == 0) f.phase = kStrChars;
      return Step::kConsumed;
  }
}

struct Stepper {
  const JsonGrammar& g;
  int value = -1;  // with Step::kValue

  bool schema_object(const JsonNode& n) const { return n.additional < 0; }
  bool can_close(const JsonFrame& f, const JsonNode& n) const {
    if (!schema_object(n)) return true;
    return g.next_required[static_cast<size_t>(f.node)][static_cast<size_t>(f.a)] ==
           static_cast<int>(n.properties.size());
  }
  bool more_keys(const JsonFrame& f, const JsonNode& n) const {
    return !schema_object(n) || f.a < static_cast<int>(n.properties.size());
  }

  Step step_object(JsonFrame& f, const JsonNode& n, uint8_t c) {
    if (is_ws(c)) return whitespace(f);
    switch (f.phase) {
      case kObjOpen:
        if (c == '}') return can_close(f, n) ? Step::kDone : Step::kReject;
        return c == '"' && more_keys(f, n) ? Step::kKey : Step::kReject;
      case kObjKey:
        return c == '"' ? Step::kKey : Step::kReject;
      case kObjColon:
        if (c != ':') return Step::kReject;
        f.phase = kObjValue;
        f.ws = 0;
        return Step::kConsumed;
      case kObjValue:
        value = f.b >= 0 ? n.properties[static_cast<size_t>(f.b)].value : n.additional;
        return Step::kValue;
      default:  // kObjNext
        if (c == '}') return can_close(f, n) ? Step::kDone : Step::kReject;
        if (c != ',' || !more_keys(f, n)) return Step::kReject;
        f.phase = kObjKey;
        f.ws = 0;
        return Step::kConsumed;
    }
  }

  Step step_array(JsonFrame& f, const JsonNode& n, uint8_t c) {
    if (is_ws(c)) return whitespace(f);
    switch (f.phase) {
      case kArrOpen:
        if (c == ']') return n.min_items == 0 ? Step::kDone : Step::kReject;
        if (n.max_items == 0) return Step::kReject;
        value = n.items;
        return Step::kValue;
      case kArrValue:
        value = n.items;
        return Step::kValue;
      default:  // kArrNext
        if (c == ']') return f.a >= n.min_items ? Step::kDone : Step::kReject;
        if (c != ',' || f.a >= n.max_items) return Step::kReject;
        f.phase = kArrValue;
        f.ws = 0;
        return Step::kConsumed;
    }
  }

  Step step(JsonFrame& f, uint8_t c) {
    if (f.node < 0) {  // the root
      if (f.phase == kRootDone) return Step::kReject;
      if (is_ws(c)) return whitespace(f);
      value = g.root;
      return Step::kValue;
    }
    const JsonNode& n = g.nodes[static_cast<size_t>(f.node)];
    switch (n.kind) {
      case JsonNodeKind::kObject: return step_object(f, n, c);
      case JsonNodeKind::kArray: return step_array(f, n, c);
      case JsonNodeKind::kString: return step_string(f, c);
      case JsonNodeKind::kNumber: return step_number(f, c, false);
      case JsonNodeKind::kInteger: return step_number(f, c, true);
      case JsonNodeKind::kLiteral:
        if (static_cast<size_t>(f.a) >= n.text.size() || static_cast<uint8_t>(n.text[static_cast<size_t>(f.a)]) != c) {
          return Step::kReject;
        }
        return ++f.a == static_cast<int32_t>(n.text.size()) ? Step::kDone : Step::kConsumed;
      default:
        return Step::kReject;  // unions never have frames
    }
  }

  // The parent learns that its child (a key or a value) is complete.
  void child_done(JsonFrame& parent, const JsonFrame& child) const {
    parent.ws = 0;
    if (parent.node < 0) {
      parent.phase = kRootDone;
      return;
    }
    const JsonNode& n = g.nodes[static_cast<size_t>(parent.node)];
    if (n.kind == JsonNodeKind::kArray) {
      parent.phase = kArrNext;
      ++parent.a;
      return;
    }
    if (parent.phase == kObjOpen || parent.phase == kObjKey) {  // a key
      const JsonNode& key = g.nodes[static_cast<size_t>(child.node)];
      parent.b = key.kind == JsonNodeKind::kLiteral ? key.property : -1;
      if (parent.b >= 0) parent.a = parent.b + 1;
      parent.phase = kObjColon;
    } else {
      parent.phase = kObjNext;
    }
  }

  // A frame for leaf node `leaf` after its first byte `c`; false if `c` cannot start it.
  bool start(int leaf, uint8_t c, JsonFrame* f, bool* done) const {
    const JsonNode& n = g.nodes[static_cast<size_t>(leaf)];
    *f = JsonFrame{};
    f->node = leaf;
    *done = false;
    switch (n.kind) {
      case JsonNodeKind::kObject: return c == '{';
      case JsonNodeKind::kArray: return c == '[';
      case JsonNodeKind::kString: return c == '"';
      case JsonNodeKind::kNumber:
      case JsonNodeKind::kInteger:
        f->a = 1;
        f->phase = c == '-' ? kNumMinus : c == '0' ? kNumZero : kNumInt;
        return c == '-' || is_digit(c);
      case JsonNodeKind::kLiteral:
        if (n.text.empty() || static_cast<uint8_t>(n.text[0]) != c) return false;
        f->a = 1;
        *done = n.text.size() == 1;
        return true;
      default:
        return false;
    }
  }
};

bool is_container(const JsonGrammar& g, int node) {
  const JsonNodeKind k = g.nodes[static_cast<size_t>(node)].kind;
  return k == JsonNodeKind::kObject || k == JsonNodeKind::kArray;
}

}  // namespace

JsonState::JsonState(const JsonGrammar* grammar) : g_(grammar) {
  frames_.push_back(JsonFrame{});
  ends_.push_back(1);
}

void JsonState::push_stack(const std::vector<JsonFrame>& frames) {
  if (ends_.size() >= static_cast<size_t>(kMaxJsonStacks)) return;  // sound: fewer choices
  frames_.insert(frames_.end(), frames.begin(), frames.end());
  ends_.push_back(static_cast<uint32_t>(frames_.size()));
}

// Feeds `c` to the stack frames_[begin, end) of this state; appends what results to `to`.
void JsonState::feed(size_t begin, size_t end, uint8_t c, JsonState* to) const {
  std::vector<JsonFrame>& st = to->scratch_;
  st.assign(frames_.begin() + static_cast<long>(begin), frames_.begin() + static_cast<long>(end));
  Stepper s{*g_};
  for (;;) {
    const Step r = s.step(st.back(), c);
    if (r == Step::kReject) return;
    if (r == Step::kConsumed) {
      to->push_stack(st);
      return;
    }
    if (r == Step::kDone || r == Step::kPass) {
      const JsonFrame child = st.back();
      st.pop_back();
      s.child_done(st.back(), child);
      if (r == Step::kDone) {
        to->push_stack(st);
        return;
      }
      continue;
    }
    // A key or a value starts with `c`: one stack per leaf it can start.
    std::vector<int> keys;
    const std::vector<int>* leaves = nullptr;
    if (r == Step::kKey) {
      const JsonFrame& f = st.back();
      const JsonNode& n = g_->nodes[static_cast<size_t>(f.node)];
      if (n.additional >= 0) {
        keys.push_back(g_->string_node);
      } else {
        const int last = g_->next_required[static_cast<size_t>(f.node)][static_cast<size_t>(f.a)];
        for (int p = f.a; p <= last && p < static_cast<int>(n.properties.size()); ++p) {
          keys.push_back(n.properties[static_cast<size_t>(p)].key);
        }
      }
      leaves = &keys;
    } else {
      leaves = &g_->leaves[static_cast<size_t>(s.value)];
    }
    const size_t depth_limit = static_cast<size_t>(kMaxJsonDepth) + 1;  // + the root frame
    for (int leaf : *leaves) {
      JsonFrame f;
      bool done = false;
      if (!s.start(leaf, c, &f, &done)) continue;
      if (is_container(*g_, leaf) && st.size() >= depth_limit) continue;
      if (done) {
        JsonFrame parent = st.back();
        s.child_done(st.back(), f);
        to->push_stack(st);
        st.back() = parent;
      } else {
        st.push_back(f);
        to->push_stack(st);
        st.pop_back();
      }
    }
    return;
  }
}

void JsonState::dedupe() {
  const size_t k = ends_.size();
  if (k < 2 || k > 64) return;
  std::vector<JsonFrame> frames;
  std::vector<uint32_t> ends;
  for (size_t i = 0; i < k; ++i) {
    const size_t b = i == 0 ? 0 : ends_[i - 1], e = ends_[i];
    bool dup = false;
    for (size_t j = 0; j < ends.size() && !dup; ++j) {
      const size_t b2 = j == 0 ? 0 : ends[j - 1], e2 = ends[j];
      dup = e2 - b2 == e - b && std::equal(frames.begin() + static_cast<long>(b2), frames.begin() + static_cast<long>(e2),
                                           frames_.begin() + static_cast<long>(b));
    }
    if (dup) continue;
    frames.insert(frames.end(), frames_.begin() + static_cast<long>(b), frames_.begin() + static_cast<long>(e));
    ends.push_back(static_cast<uint32_t>(frames.size()));
  }
  frames_.swap(frames);
  ends_.swap(ends);
}

bool JsonState::step(const JsonState& from, uint8_t byte, JsonState* to) {
  to->g_ = from.g_;
  to->frames_.clear();
  to->ends_.clear();
  for (size_t i = 0; i < from.ends_.size(); ++i) {
    from.feed(i == 0 ? 0 : from.ends_[i - 1], from.ends_[i], byte, to);
  }
  if (to->ends_.size() > 1) to->dedupe();
  return !to->ends_.empty();
}

bool JsonState::advance(std::string_view bytes) {
  JsonState a = *this, b(g_);
  for (char c : bytes) {
    if (!step(a, static_cast<uint8_t>(c), &b)) return false;
    std::swap(a, b);
  }
  *this = std::move(a);
  return true;
}

bool JsonState::complete() const {
  Stepper s{*g_};
  for (size_t i = 0; i < ends_.size(); ++i) {
    std::vector<JsonFrame> st(frames_.begin() + (i == 0 ? 0 : ends_[i - 1]), frames_.begin() + ends_[i]);
    // A number may end the input: pop accepting numbers.
    while (st.size() > 1) {
      const JsonFrame& top = st.back();
      const JsonNodeKind k = g_->nodes[static_cast<size_t>(top.node)].kind;
      if ((k != JsonNodeKind::kNumber && k != JsonNodeKind::kInteger) || !number_accepting(top.phase)) break;
      const JsonFrame child = top;
      st.pop_back();
      s.child_done(st.back(), child);
    }
    if (st.size() == 1 && st[0].phase == kRootDone) return true;
  }
  return false;
}

bool JsonState::closed() const {
  for (size_t i = 0; i < ends_.size(); ++i) {
    const size_t b = i == 0 ? 0 : ends_[i - 1];
    if (ends_[i] - b != 1 || frames_[b].phase != kRootDone) return false;
  }
  return !ends_.empty();
}

bool JsonState::in_plain_string() const {
  if (ends_.size() != 1) return false;
  const JsonFrame& top = frames_.back();
  return top.node >= 0 && g_->nodes[static_cast<size_t>(top.node)].kind == JsonNodeKind::kString &&
         top.phase == kStrChars;
}

}  // namespace moe
