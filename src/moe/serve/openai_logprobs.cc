#include "moe/serve/openai_logprobs.h"

#include <cmath>

namespace moe::serve {
namespace {

using nlohmann::json;

double finite_or_floor(float lp) { return std::isfinite(lp) ? static_cast<double>(lp) : -9999.0; }

json token_entry(int id, float logprob, const TokenText& token_text) {
  const std::string text = token_text(id);
  json bytes = json::array();
  for (unsigned char c : text) bytes.push_back(static_cast<int>(c));
  return {{"token", text}, {"logprob", finite_or_floor(logprob)}, {"bytes", std::move(bytes)}};
}

}  // namespace

void CompletionLogprobs::add(const std::vector<TokenLogprob>& tokens, bool prompt) {
  for (size_t i = 0; i < tokens.size(); ++i) {
    const TokenLogprob& t = tokens[i];
    const std::string text = token_text_(t.token_id);
    tokens_.push_back(text);
    offsets_.push_back(offset_);
    offset_ += text.size();
    if (prompt && i == 0) {
      logprobs_.push_back(nullptr);
      top_.push_back(nullptr);
      continue;
    }
    logprobs_.push_back(finite_or_floor(t.logprob));
    json top = json::object();
    for (const auto& [id, lp] : t.top) top[token_text_(id)] = finite_or_floor(lp);
    top[text] = finite_or_floor(t.logprob);  // the sampled token is always listed
    top_.push_back(std::move(top));
  }
}

json CompletionLogprobs::take() {
  json j = {{"tokens", std::move(tokens_)},
            {"token_logprobs", std::move(logprobs_)},
            {"top_logprobs", std::move(top_)},
            {"text_offset", std::move(offsets_)}};
  tokens_ = json::array();
  logprobs_ = json::array();
  top_ = json::array();
  offsets_ = json::array();
  return j;
}

json chat_logprob_entries(const std::vector<TokenLogprob>& tokens, const TokenText& token_text) {
  json out = json::array();
  for (const TokenLogprob& t : tokens) {
    json e = token_entry(t.token_id, t.logprob, token_text);
    json top = json::array();
    for (const auto& [id, lp] : t.top) top.push_back(token_entry(id, lp, token_text));
    e["top_logprobs"] = std::move(top);
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace moe::serve
