#include "moe/serve_bench/chaos_workload.h"

#include <httplib.h>

#include "moe/serve_bench/sse.h"

namespace moe::serve_bench {

using Clock = std::chrono::steady_clock;

namespace {

// Shakespeare-style openings (the shipped model's domain), of varied length.
const std::vector<std::string>& prompts() {
  static const std::vector<std::string> p = {
      "ROMEO:\n",
      "JULIET:\nO Romeo, Romeo,",
      "HAMLET:\nTo be, or not to be,",
      "KING LEAR:\nBlow, winds, and crack your cheeks!",
      "MACBETH:\nIs this a dagger which I see before me,",
      "OTHELLO:\nKeep up your bright swords,",
      "PORTIA:\nThe quality of mercy is not strain'd;",
      "BRUTUS:\nRomans, countrymen, and lovers!",
      "First Citizen:\nBefore we proceed any further, hear me speak.",
      "GLOUCESTER:\nNow is the winter of our discontent",
      "PROSPERO:\nOur revels now are ended.",
      "VIOLA:\nI left no ring with her:",
  };
  return p;
}

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

}  // namespace

std::vector<ChaosRequest> make_chaos_workload(int count, int max_tokens, int64_t seed_base) {
  std::vector<ChaosRequest> out;
  for (int i = 0; i < count; ++i) {
    ChaosRequest r;
    r.index = i;
    r.chat = (i & 1) != 0;
    r.stream = (i & 2) != 0;
    r.greedy = (i & 4) == 0;
    r.seed = seed_base + i;
    r.prompt = prompts()[static_cast<size_t>(i) % prompts().size()];
    r.max_tokens = max_tokens;
    out.push_back(std::move(r));
  }
  return out;
}

nlohmann::json chaos_request_body(const ChaosRequest& r, const std::string& model) {
  nlohmann::json b;
  b["model"] = model;
  if (r.chat) {
    b["messages"] = nlohmann::json::array({{{"role", "user"}, {"content", r.prompt}}});
  } else {
    b["prompt"] = r.prompt;
  }
  b["max_tokens"] = r.max_tokens;
  b["temperature"] = r.greedy ? 0.0 : 0.8;
  if (!r.greedy) b["seed"] = r.seed;
  b["stream"] = r.stream;
  b["ignore_eos"] = true;
  return b;
}

const char* outcome_name(Outcome o) {
  switch (o) {
    case Outcome::kCompleted: return "completed";
    case Outcome::kErrored: return "errored";
    case Outcome::kLost: return "lost";
  }
  return "?";
}

ChaosResult classify_exchange(const RawExchange& raw) {
  ChaosResult r;
  r.http_status = raw.status;
  r.start_s = raw.start_s;
  r.end_s = raw.end_s;
  r.outcome = Outcome::kLost;
  if (!raw.connected) {
    r.refused = raw.transport_error == "Connection";  // httplib: the connect failed
    r.detail = "no response: " + (raw.transport_error.empty() ? std::string("unknown") : raw.transport_error);
    return r;
  }
  if (raw.status != 200) {
    if (raw.status >= 400 && !raw.body.empty()) {
      r.outcome = Outcome::kErrored;
      r.detail = "HTTP " + std::to_string(raw.status) + ": " + raw.body.substr(0, 200);
    } else {
      r.detail = "HTTP " + std::to_string(raw.status) + " with " + (raw.body.empty() ? "no body" : "a body") +
                 (raw.transport_ok ? "" : " (cut: " + raw.transport_error + ")");
    }
    return r;
  }
  if (!raw.stream) {
    if (!raw.transport_ok) {
      r.detail = "200, body cut: " + raw.transport_error;
      return r;
    }
    const nlohmann::json j = nlohmann::json::parse(raw.body, nullptr, false);
    const nlohmann::json* choice = nullptr;
    if (j.is_object() && j.contains("choices") && j["choices"].is_array() && !j["choices"].empty()) {
      choice = &j["choices"][0];
    }
    if (j.is_object() && j.contains("error")) {
      r.outcome = Outcome::kErrored;
      r.detail = "200 with an error body: " + raw.body.substr(0, 200);
      return r;
    }
    const nlohmann::json* text = nullptr;
    if (choice != nullptr && raw.chat && choice->contains("message") && (*choice)["message"].is_object()) {
      auto it = (*choice)["message"].find("content");
      if (it != (*choice)["message"].end() && it->is_string()) text = &*it;
    } else if (choice != nullptr && !raw.chat && choice->contains("text") && (*choice)["text"].is_string()) {
      text = &(*choice)["text"];
    }
    if (text == nullptr) {
      r.detail = raw.body.empty() ? "200 with an empty body" : "200 with no completion in the body";
      return r;
    }
    r.text = text->get<std::string>();
    r.outcome = Outcome::kCompleted;
    r.token_times_s.push_back(raw.end_s);
    return r;
  }
  bool done = false;
  std::string error;
  for (size_t i = 0; i < raw.events.size(); ++i) {
    auto chunk = parse_stream_chunk(raw.events[i], raw.chat);
    if (!chunk.ok()) continue;
    if (chunk->done) {
      done = true;
      continue;
    }
    if (!chunk->error.empty()) {
      if (error.empty()) error = chunk->error;
      continue;
    }
    if (!chunk->text.empty()) {
      r.text += chunk->text;
      r.token_times_s.push_back(i < raw.event_times_s.size() ? raw.event_times_s[i] : raw.end_s);
    }
  }
  if (!error.empty()) {
    r.outcome = Outcome::kErrored;
    r.detail = "SSE error event: " + error + (done ? "" : " (no [DONE])");
  } else if (done && raw.transport_ok) {
    r.outcome = Outcome::kCompleted;
  } else {
    r.detail = std::string("stream ended without [DONE] and without an error") +
               (raw.transport_ok ? "" : " (" + raw.transport_error + ")");
  }
  return r;
}

ChaosResult send_chaos_request(const std::string& origin, const ChaosRequest& request, const std::string& model,
                               double read_timeout_s, Clock::time_point t0, ChaosProgress* progress) {
  RawExchange raw;
  raw.chat = request.chat;
  raw.stream = request.stream;
  raw.start_s = since(t0);
  auto touch = [&] {
    if (progress != nullptr) progress->last_byte_ns.store(Clock::now().time_since_epoch().count());
  };
  try {
    httplib::Client cli(origin);
    cli.set_connection_timeout(5, 0);
    const auto read_s = static_cast<time_t>(read_timeout_s);
    cli.set_read_timeout(read_s, static_cast<time_t>((read_timeout_s - static_cast<double>(read_s)) * 1e6));
    cli.set_keep_alive(false);
    httplib::Request req;
    req.method = "POST";
    req.path = request.endpoint();
    req.set_header("Content-Type", "application/json");
    req.body = chaos_request_body(request, model).dump();
    SseParser parser;
    req.response_handler = [&](const httplib::Response& res) {
      raw.connected = true;
      raw.status = res.status;
      touch();
      return true;
    };
    req.content_receiver = [&](const char* data, size_t len, uint64_t, uint64_t) {
      touch();
      if (request.stream && raw.status == 200) {
        const double t = since(t0);
        parser.feed(std::string_view(data, len), [&](std::string_view ev) {
          raw.events.emplace_back(ev);
          raw.event_times_s.push_back(t);
          if (progress != nullptr) progress->delivered_tokens.fetch_add(1);
        });
      } else {
        raw.body.append(data, len);
      }
      return true;
    };
    httplib::Result res = cli.send(req);
    raw.transport_ok = static_cast<bool>(res);
    if (!res) raw.transport_error = httplib::to_string(res.error());
    if (request.stream && raw.transport_ok) {
      const double t = since(t0);
      parser.finish([&](std::string_view ev) {
        raw.events.emplace_back(ev);
        raw.event_times_s.push_back(t);
      });
    }
  } catch (const std::exception& e) {
    raw.transport_ok = false;
    raw.transport_error = std::string("client error: ") + e.what();
  }
  raw.end_s = since(t0);
  touch();
  return classify_exchange(raw);
}

}  // namespace moe::serve_bench
