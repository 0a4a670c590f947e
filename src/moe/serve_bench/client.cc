#include "moe/serve_bench/client.h"

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

namespace moe::serve_bench {

using Clock = std::chrono::steady_clock;

namespace {

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

void set_timeout(httplib::Client& cli, double connect_s, double read_s) {
  auto split = [](double s) {
    const double whole = std::floor(s);
    return std::pair<time_t, time_t>(static_cast<time_t>(whole), static_cast<time_t>((s - whole) * 1e6));
  };
  auto [cs, cus] = split(connect_s);
  auto [rs, rus] = split(read_s);
  cli.set_connection_timeout(cs, cus);
  cli.set_read_timeout(rs, rus);
  cli.set_write_timeout(rs, rus);
}

std::string shorten(std::string s, size_t n = 500) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  if (s.size() > n) s = s.substr(0, n) + "...";
  return s;
}

httplib::Headers headers_for(const ClientOptions& o) {
  httplib::Headers h;
  if (!o.api_key.empty()) h.emplace("Authorization", "Bearer " + o.api_key);
  return h;
}

}  // namespace

StatusOr<BaseUrl> parse_base_url(const std::string& url) {
  std::string rest;
  std::string scheme;
  if (url.rfind("http://", 0) == 0) {
    scheme = "http://";
  } else if (url.rfind("https://", 0) == 0) {
    scheme = "https://";
  } else {
    return invalid_argument("--base-url: '" + url + "' must start with http:// or https://");
  }
  rest = url.substr(scheme.size());
  const size_t slash = rest.find('/');
  std::string authority = rest.substr(0, slash);
  std::string prefix = slash == std::string::npos ? "" : rest.substr(slash);
  while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
  if (authority.empty()) return invalid_argument("--base-url: '" + url + "' has no host");
  if (size_t colon = authority.rfind(':'); colon != std::string::npos && authority.back() != ']') {
    const std::string port = authority.substr(colon + 1);
    if (port.empty() || !std::all_of(port.begin(), port.end(), [](unsigned char c) { return std::isdigit(c); }) ||
        port.size() > 5 || std::stoi(port) > 65535 || colon == 0) {
      return invalid_argument("--base-url: '" + url + "' has a bad host:port");
    }
  }
  return BaseUrl{scheme + authority, prefix};
}

bool is_chat_endpoint(const std::string& endpoint) {
  const std::string suffix = "chat/completions";
  return endpoint.size() >= suffix.size() && endpoint.compare(endpoint.size() - suffix.size(), suffix.size(), suffix) == 0;
}

nlohmann::json request_body(const ClientOptions& o, const SampleRequest& r) {
  nlohmann::json b;
  b["model"] = o.model;
  if (is_chat_endpoint(o.endpoint) && !r.messages.empty()) {
    nlohmann::json messages = nlohmann::json::array();
    for (const ChatMessage& m : r.messages) messages.push_back({{"role", m.role}, {"content", m.content}});
    b["messages"] = std::move(messages);
  } else if (is_chat_endpoint(o.endpoint)) {
    b["messages"] = nlohmann::json::array({{{"role", "user"}, {"content", r.prompt}}});
  } else {
    b["prompt"] = r.prompt;
  }
  b["max_tokens"] = r.output_len;
  b["temperature"] = o.temperature;
  b["stream"] = true;
  b["stream_options"] = {{"include_usage", true}};
  if (o.ignore_eos) b["ignore_eos"] = true;
  return b;
}

RequestOutput send_request(const ClientOptions& o, const SampleRequest& r, Clock::time_point t0) {
  StreamRecorder rec(is_chat_endpoint(o.endpoint), r.prompt_len);
  int status = 0;
  std::string error_body;
  Clock::time_point st = Clock::now();
  double last_byte_t = -1;
  try {
    httplib::Client cli(o.base.origin);
    set_timeout(cli, o.connect_timeout_s, o.read_timeout_s);
    cli.set_keep_alive(false);
    httplib::Request req;
    req.method = "POST";
    req.path = o.base.prefix + o.endpoint;
    req.headers = headers_for(o);
    req.headers.emplace("Accept", "text/event-stream");
    req.set_header("Content-Type", "application/json");
    req.body = request_body(o, r).dump();
    req.response_handler = [&](const httplib::Response& res) {
      status = res.status;
      return true;
    };
    req.content_receiver = [&](const char* data, size_t len, uint64_t, uint64_t) {
      const double t = seconds(Clock::now() - st);
      if (status == 200) {
        rec.on_bytes(std::string_view(data, len), t);
        last_byte_t = t;
      } else if (error_body.size() < 4096) {
        error_body.append(data, len);
      }
      return true;
    };
    st = Clock::now();
    httplib::Result res = cli.send(req);
    const double t_end = seconds(Clock::now() - st);
    if (!res) {
      rec.fail("cannot complete the request to " + o.base.origin + req.path + ": " + httplib::to_string(res.error()),
               t_end);
    } else if (status != 200) {
      rec.fail("HTTP " + std::to_string(status) + (error_body.empty() ? "" : ": " + shorten(error_body)), t_end);
    } else {
      rec.finish(last_byte_t >= 0 ? last_byte_t : t_end);
    }
  } catch (const std::exception& e) {
    rec.fail(std::string("client error: ") + e.what(), seconds(Clock::now() - st));
  }
  RequestOutput out = rec.take();
  out.start_s = seconds(st - t0);
  out.http_status = status;
  return out;
}

StatusOr<std::vector<ServedModel>> list_models(const ClientOptions& o) {
  const std::string url = o.base.origin + o.base.prefix + "/v1/models";
  try {
    httplib::Client cli(o.base.origin);
    set_timeout(cli, o.connect_timeout_s, std::min(o.read_timeout_s, 30.0));
    httplib::Result res = cli.Get((o.base.prefix + "/v1/models").c_str(), headers_for(o));
    if (!res) {
      return Status(StatusCode::kUnavailable, "cannot reach " + url + ": " + httplib::to_string(res.error()));
    }
    if (res->status != 200) {
      return failed_precondition("GET " + url + ": HTTP " + std::to_string(res->status) + ": " + shorten(res->body));
    }
    nlohmann::json j = nlohmann::json::parse(res->body, nullptr, false);
    std::vector<ServedModel> ids;
    if (j.is_object() && j.contains("data") && j["data"].is_array()) {
      for (const auto& m : j["data"]) {
        if (!m.is_object() || !m.contains("id") || !m["id"].is_string()) continue;
        ServedModel sm;
        sm.id = m["id"].get<std::string>();
        if (auto it = m.find("max_model_len"); it != m.end() && it->is_number_integer()) sm.max_model_len = it->get<int>();
        ids.push_back(std::move(sm));
      }
    }
    if (ids.empty()) return data_loss("GET " + url + ": no model in the answer '" + shorten(res->body, 200) + "'");
    return ids;
  } catch (const std::exception& e) {
    return Status(StatusCode::kUnavailable, "GET " + url + ": " + e.what());
  }
}

RunResult run_benchmark(const ClientOptions& o, const std::vector<SampleRequest>& requests,
                        const std::vector<double>& arrivals, int max_concurrency, const ProgressFn& progress,
                        double progress_interval_s) {
  const int n = static_cast<int>(requests.size());
  RunResult result;
  result.outputs.resize(requests.size());

  std::mutex mu;
  std::condition_variable cv;
  int in_flight = 0;
  std::deque<int> finished;  // threads to join
  std::atomic<int> done{0}, failed{0};
  bool all_done = false;

  const Clock::time_point t0 = Clock::now();
  std::condition_variable tick_cv;  // wakes the ticker only at the end
  std::thread ticker;
  if (progress) {
    ticker = std::thread([&] {
      const auto interval = std::chrono::duration_cast<Clock::duration>(
          std::chrono::duration<double>(std::max(progress_interval_s, 0.01)));
      Clock::time_point next = t0 + interval;
      std::unique_lock<std::mutex> lock(mu);
      for (;;) {
        if (tick_cv.wait_until(lock, next, [&] { return all_done; })) break;
        next += interval;
        lock.unlock();
        progress(done.load(), failed.load(), n, seconds(Clock::now() - t0));
        lock.lock();
      }
    });
  }

  std::vector<std::thread> threads(requests.size());
  auto reap = [&](std::unique_lock<std::mutex>& lock) {
    while (!finished.empty()) {
      const int k = finished.front();
      finished.pop_front();
      lock.unlock();
      threads[static_cast<size_t>(k)].join();
      lock.lock();
    }
  };
  for (int i = 0; i < n; ++i) {
    const double at = i < static_cast<int>(arrivals.size()) ? arrivals[static_cast<size_t>(i)] : 0.0;
    const Clock::time_point when = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(at));
    std::unique_lock<std::mutex> lock(mu);
    for (;;) {
      reap(lock);
      const bool slot = max_concurrency <= 0 || in_flight < max_concurrency;
      if (slot && Clock::now() >= when) break;
      if (!slot) {
        cv.wait(lock);
      } else {
        cv.wait_until(lock, when);
      }
    }
    ++in_flight;
    lock.unlock();
    threads[static_cast<size_t>(i)] = std::thread([&, i] {
      RequestOutput out = send_request(o, requests[static_cast<size_t>(i)], t0);
      const bool ok = out.success;
      result.outputs[static_cast<size_t>(i)] = std::move(out);
      if (!ok) failed.fetch_add(1);
      done.fetch_add(1);
      std::lock_guard<std::mutex> g(mu);
      --in_flight;
      finished.push_back(i);
      cv.notify_all();
    });
  }
  {
    std::unique_lock<std::mutex> lock(mu);
    for (;;) {
      reap(lock);
      if (in_flight == 0 && finished.empty()) break;
      cv.wait(lock);
    }
  }
  result.duration_s = seconds(Clock::now() - t0);
  {
    std::lock_guard<std::mutex> g(mu);
    all_done = true;
  }
  tick_cv.notify_all();
  if (ticker.joinable()) ticker.join();
  if (progress) progress(done.load(), failed.load(), n, result.duration_s);
  return result;
}

}  // namespace moe::serve_bench
