#include "moe/model/hf/bpe_model.h"

#include <cstdio>
#include <queue>

#include "moe/model/hf/utf8_util.h"

namespace moe::hf {
namespace {

constexpr size_t kCacheCapacity = 1 << 16;  // words; cleared when full
constexpr size_t kMaxCachedWord = 256;      // bytes; longer words are not cached

uint64_t pair_key(int a, int b) { return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b); }

}  // namespace

StatusOr<std::unique_ptr<BpeModel>> BpeModel::parse(const Json& j, const std::string& where) {
  MOE_ASSIGN_OR_RETURN(std::string type, get_type(j, where));
  if (type != "BPE") {
    return bad(field(where, "type"), "unsupported model type \"" + type + "\" (only BPE is supported)");
  }
  std::unique_ptr<BpeModel> m(new BpeModel());
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    MOE_ASSIGN_OR_RETURN(std::string v, get_string(j, key, where));
    if (!v.empty()) return bad(field(where, key), "is not supported (\"" + v + "\")");
  }
  if (j.contains("dropout") && !j["dropout"].is_null() && !(j["dropout"].is_number() && j["dropout"].get<double>() == 0)) {
    return bad(field(where, "dropout"), "BPE dropout is not supported at inference");
  }
  MOE_ASSIGN_OR_RETURN(m->fuse_unk_, get_bool(j, "fuse_unk", where, false));
  MOE_ASSIGN_OR_RETURN(m->byte_fallback_, get_bool(j, "byte_fallback", where, false));
  MOE_ASSIGN_OR_RETURN(m->ignore_merges_, get_bool(j, "ignore_merges", where, false));

  auto vocab = j.find("vocab");
  if (vocab == j.end() || !vocab->is_object()) return bad(field(where, "vocab"), "expected an object of token: id");
  int max_id = -1;
  for (auto it = vocab->begin(); it != vocab->end(); ++it) {
    if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > (1 << 24)) {
      return bad(field(field(where, "vocab"), it.key()), "expected a non-negative integer id");
    }
    const int id = it->get<int>();
    m->vocab_[it.key()] = id;
    max_id = std::max(max_id, id);
  }
  m->id_to_token_.assign(static_cast<size_t>(max_id + 1), std::string());
  m->has_id_.assign(static_cast<size_t>(max_id + 1), false);
  for (const auto& [tok, id] : m->vocab_) {
    m->id_to_token_[static_cast<size_t>(id)] = tok;
    m->has_id_[static_cast<size_t>(id)] = true;
  }

  MOE_ASSIGN_OR_RETURN(const Json* merges, get_array(j, "merges", where));
  const std::string mwhere = field(where, "merges");
  for (size_t i = 0; i < merges->size(); ++i) {
    const Json& e = (*merges)[i];
    std::string a, b;
    if (e.is_string()) {
      const std::string s = e.get<std::string>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || sp == 0 || sp + 1 >= s.size() || s.find(' ', sp + 1) != std::string::npos) {
        return bad(item(mwhere, i), "expected \"left right\" (two tokens separated by one space), got \"" + s + "\"");
      }
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
      a = e[0].get<std::string>();
      b = e[1].get<std::string>();
    } else {
      return bad(item(mwhere, i), "expected a \"left right\" string or a [left, right] pair, got " + e.dump());
    }
    const int ia = m->token_to_id(a), ib = m->token_to_id(b), ir = m->token_to_id(a + b);
    if (ia < 0 || ib < 0 || ir < 0) {
      const std::string& missing = ia < 0 ? a : ib < 0 ? b : a + b;
      return bad(item(mwhere, i), "merge \"" + a + "\" + \"" + b + "\": \"" + missing + "\" is not in model.vocab");
    }
    m->merges_.emplace(pair_key(ia, ib), std::make_pair(static_cast<int>(i), ir));
  }

  MOE_ASSIGN_OR_RETURN(std::string unk, get_string(j, "unk_token", where));
  if (!unk.empty()) {
    m->unk_id_ = m->token_to_id(unk);
    if (m->unk_id_ < 0) return bad(field(where, "unk_token"), "\"" + unk + "\" is not in model.vocab");
  }
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    m->byte_ids_[b] = m->token_to_id(name);
  }
  return m;
}

const std::string* BpeModel::id_to_token(int id) const {
  if (id < 0 || id >= size() || !has_id_[static_cast<size_t>(id)]) return nullptr;
  return &id_to_token_[static_cast<size_t>(id)];
}

int BpeModel::token_to_id(const std::string& token) const {
  auto it = vocab_.find(token);
  return it == vocab_.end() ? -1 : it->second;
}

void BpeModel::encode_word(const std::string& word, std::vector<int>* ids) const {
  if (ignore_merges_) {
    const int id = token_to_id(word);
    if (id >= 0) {
      ids->push_back(id);
      return;
    }
  }
  const bool cacheable = word.size() <= kMaxCachedWord;
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mu_);
    auto it = cache_.find(word);
    if (it != cache_.end()) {
      ids->insert(ids->end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int> out;
  merge_word(word, &out);
  ids->insert(ids->end(), out.begin(), out.end());
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mu_);
    if (cache_.size() >= kCacheCapacity) cache_.clear();
    cache_.emplace(word, std::move(out));
  }
}

void BpeModel::merge_word(const std::string& word, std::vector<int>* ids) const {
  // Symbols of the word: one per character (or per byte via byte_fallback / unk).
  struct Sym {
    int id;
    int prev, next;
    bool alive;
  };
  std::vector<Sym> syms;
  syms.reserve(word.size());
  bool last_was_unk = false;
  for (size_t i = 0; i < word.size();) {
    const size_t start = i;
    i += static_cast<size_t>(std::min<int>(utf8_len(static_cast<unsigned char>(word[start])),
                                           static_cast<int>(word.size() - start)));
    const int id = token_to_id(word.substr(start, i - start));
    if (id >= 0) {
      syms.push_back({id, 0, 0, true});
      last_was_unk = false;
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (size_t k = start; k < i; ++k) all = all && byte_ids_[static_cast<unsigned char>(word[k])] >= 0;
      if (all) {
        for (size_t k = start; k < i; ++k) syms.push_back({byte_ids_[static_cast<unsigned char>(word[k])], 0, 0, true});
        last_was_unk = false;
        continue;
      }
    }
    if (unk_id_ >= 0) {
      if (!(fuse_unk_ && last_was_unk)) syms.push_back({unk_id_, 0, 0, true});
      last_was_unk = true;
    }
    // Without an unk token the character is dropped, as Hugging Face's BPE does.
  }
  const int n = static_cast<int>(syms.size());
  for (int k = 0; k < n; ++k) {
    syms[static_cast<size_t>(k)].prev = k - 1;
    syms[static_cast<size_t>(k)].next = k + 1 < n ? k + 1 : -1;
  }
  // Lowest rank first, then leftmost.
  struct Cand {
    int rank, pos, new_id;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> queue;
  auto push = [&](int pos) {
    const int nx = syms[static_cast<size_t>(pos)].next;
    if (nx < 0) return;
    auto it = merges_.find(pair_key(syms[static_cast<size_t>(pos)].id, syms[static_cast<size_t>(nx)].id));
    if (it != merges_.end()) queue.push({it->second.first, pos, it->second.second});
  };
  for (int k = 0; k + 1 < n; ++k) push(k);
  while (!queue.empty()) {
    const Cand c = queue.top();
    queue.pop();
    Sym& left = syms[static_cast<size_t>(c.pos)];
    if (!left.alive || left.next < 0) continue;
    Sym& right = syms[static_cast<size_t>(left.next)];
    auto it = merges_.find(pair_key(left.id, right.id));
    if (it == merges_.end() || it->second.second != c.new_id) continue;  // stale entry
    left.id = c.new_id;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) syms[static_cast<size_t>(right.next)].prev = c.pos;
    if (left.prev >= 0) push(left.prev);
    push(c.pos);
  }
  for (int k = n > 0 ? 0 : -1; k >= 0; k = syms[static_cast<size_t>(k)].next) ids->push_back(syms[static_cast<size_t>(k)].id);
}

}  // namespace moe::hf
