#include "moe/supervisor/worker_endpoint.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <fstream>
#include <map>
#include <mutex>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "moe/core/logging.h"
#include "moe/serve/thread_pool.h"
#include "moe/supervisor/worker_protocol.h"

namespace moe::supervisor {
namespace {

constexpr const char* kJson = "application/json";
constexpr const char* kNdjson = "application/x-ndjson";

// The lines of one /submit stream, from the service's sink (producer) to the HTTP
// thread writing them (consumer). push() never blocks beyond a short critical section.
class LineQueue {
 public:
  void push(std::string line, bool last) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      lines_.push_back(std::move(line));
      if (last) finished_ = true;
    }
    cv_.notify_one();
  }
  // Waits up to `timeout` and appends every queued line to *out.
  void wait_pop(std::string* out, std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, timeout, [&] { return !lines_.empty() || cut_; });
    while (!lines_.empty()) {
      *out += lines_.front();
      lines_.pop_front();
    }
  }
  bool finished() {
    std::lock_guard<std::mutex> lock(mu_);
    return finished_ && lines_.empty();
  }
  void cut() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      cut_ = true;
    }
    cv_.notify_all();
  }
  bool is_cut() {
    std::lock_guard<std::mutex> lock(mu_);
    return cut_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> lines_;
  bool finished_ = false, cut_ = false;
};

struct Stream {
  uint64_t id = 0;
  std::shared_ptr<LineQueue> queue;
  bool done_sent = false;
};

}  // namespace

struct WorkerEndpoint::Impl {
  Impl(GenerationService& s, WorkerEndpointOptions o) : service(s), options(std::move(o)) {}
  GenerationService& service;
  WorkerEndpointOptions options;
  httplib::Server svr;
  std::thread thread;
  int port = -1;
  bool started = false, stopped = false;
  std::mutex stop_mu;
  mutable std::mutex mu;
  std::map<uint64_t, std::shared_ptr<LineQueue>> open;
  bool cutting = false;

  void install_routes();
  void handle_submit(const httplib::Request& req, httplib::Response& res);
};

void WorkerEndpoint::Impl::handle_submit(const httplib::Request& req, httplib::Response& res) {
  auto request = decode_request(req.body);
  if (!request.ok()) {
    res.set_content(encode_submit_reply(request.status()) + "\n", kNdjson);
    return;
  }
  auto queue = std::make_shared<LineQueue>();
  auto submitted = service.submit(std::move(request).value(), [queue](SeqEvent&& ev) {
    const bool last = ev.finished;
    queue->push(encode_event(ev) + "\n", last);
  });
  if (!submitted.ok()) {
    res.set_content(encode_submit_reply(submitted.status()) + "\n", kNdjson);
    return;
  }
  const uint64_t id = submitted.value();
  {
    std::lock_guard<std::mutex> lock(mu);
    open[id] = queue;
    if (cutting) queue->cut();
  }
  auto stream = std::make_shared<Stream>();
  stream->id = id;
  stream->queue = queue;
  std::string first = encode_submit_reply(StatusOr<uint64_t>(id)) + "\n";
  res.set_chunked_content_provider(
      kNdjson,
      [this, stream, first](size_t offset, httplib::DataSink& sink) {
        std::string out = offset == 0 ? first : std::string();
        if (out.empty()) stream->queue->wait_pop(&out, std::chrono::milliseconds(options.poll_ms));
        if (stream->queue->is_cut()) return false;  // dying: no final chunk
        if (out.empty() && !sink.is_writable()) return false;  // the supervisor went away
        if (!out.empty() && !sink.write(out.data(), out.size())) return false;
        if (stream->queue->finished()) {
          stream->done_sent = true;
          sink.done();
        }
        return true;
      },
      [this, stream](bool) {
        if (!stream->done_sent) service.cancel(stream->id);
        std::lock_guard<std::mutex> lock(mu);
        open.erase(stream->id);
      });
}

void WorkerEndpoint::Impl::install_routes() {
  svr.Post("/submit", [this](const httplib::Request& req, httplib::Response& res) { handle_submit(req, res); });
  svr.Post("/cancel", [this](const httplib::Request& req, httplib::Response& res) {
    auto j = nlohmann::json::parse(req.body, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("id") || !j["id"].is_number_unsigned()) {
      res.status = 400;
      res.set_content(R"({"error":"expected {\"id\":N}"})", kJson);
      return;
    }
    service.cancel(j["id"].get<uint64_t>());
    res.set_content("{}", kJson);
  });
  svr.Post("/reset_prefix_cache", [this](const httplib::Request&, httplib::Response& res) {
    const Status st = service.reset_prefix_cache();
    res.set_content(st.ok() ? std::string("{}")
                            : nlohmann::json({{"error", {{"code", static_cast<int>(st.code())}, {"message", st.message()}}}})
                                  .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
                    kJson);
  });
  svr.Get("/info", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(encode_model_info(service.model_info()), kJson);
  });
  svr.Get("/snapshot", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(encode_snapshot(service.snapshot()), kJson);
  });
  svr.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(encode_health(service.health()), kJson);
  });
  svr.Post("/count_tokens", [this](const httplib::Request& req, httplib::Response& res) {
    auto j = nlohmann::json::parse(req.body, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("text") || !j["text"].is_string()) {
      res.status = 400;
      res.set_content(R"({"error":"expected {\"text\":\"...\"}"})", kJson);
      return;
    }
    res.set_content(nlohmann::json({{"count", service.count_tokens(j["text"].get<std::string>())}}).dump(), kJson);
  });
  svr.Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) {
    auto j = nlohmann::json::parse(req.body, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("text") || !j["text"].is_string() ||
        (j.contains("add_special_tokens") && !j["add_special_tokens"].is_boolean())) {
      res.status = 400;
      res.set_content(R"({"error":"expected {\"text\":\"...\",\"add_special_tokens\":B}"})", kJson);
      return;
    }
    const bool special = j.value("add_special_tokens", true);
    res.set_content(encode_ids_reply(service.tokenize(j["text"].get<std::string>(), special)), kJson);
  });
  svr.Post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) {
    auto j = nlohmann::json::parse(req.body, nullptr, false);
    std::vector<int> ids;
    bool ok = !j.is_discarded() && j.is_object() && j.contains("ids") && j["ids"].is_array();
    for (size_t i = 0; ok && i < j["ids"].size(); ++i) {
      ok = j["ids"][i].is_number_integer();
      if (ok) ids.push_back(j["ids"][i].get<int>());
    }
    if (!ok) {
      res.status = 400;
      res.set_content(R"({"error":"expected {\"ids\":[N,...]}"})", kJson);
      return;
    }
    res.set_content(encode_text_reply(service.detokenize(ids)), kJson);
  });
  svr.Get("/vocab_bytes", [this](const httplib::Request&, httplib::Response& res) {
    const int vocab = service.model_info().vocab_size;
    std::vector<std::string> tokens(static_cast<size_t>(std::max(0, vocab)));
    for (int id = 0; id < vocab; ++id) tokens[static_cast<size_t>(id)] = service.token_bytes(id);
    res.set_content(encode_vocab_bytes(tokens), kJson);
  });
  svr.set_exception_handler([](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown exception";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    MOE_LOG_ERROR("worker endpoint: {} {}: {}", req.method, req.path, what);
    res.status = 500;
    res.set_content(nlohmann::json({{"error", what}}).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
                    kJson);
  });
}

WorkerEndpoint::WorkerEndpoint(GenerationService& service, WorkerEndpointOptions options)
    : impl_(std::make_unique<Impl>(service, std::move(options))) {}

WorkerEndpoint::~WorkerEndpoint() { stop(); }

Status WorkerEndpoint::start() {
  Impl& m = *impl_;
  if (m.started) return failed_precondition("WorkerEndpoint::start called twice");
  ::signal(SIGPIPE, SIG_IGN);
  m.install_routes();
  // A /submit stream holds its thread for the request's life: grow on demand.
  m.svr.new_task_queue = [] { return new serve::GrowingThreadPool(4, 4096); };
  m.svr.set_keep_alive_max_count(100000);
  m.svr.set_socket_options([](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  errno = 0;
  int port = -1;
  if (m.options.port == 0) {
    port = m.svr.bind_to_any_port(m.options.host);
  } else if (m.svr.bind_to_port(m.options.host, m.options.port)) {
    port = m.options.port;
  }
  if (port <= 0) {
    const std::string why = errno != 0 ? std::strerror(errno) : "not an address of this machine";
    return Status(StatusCode::kUnavailable, "worker endpoint: cannot listen on " + m.options.host + ":" +
                                                std::to_string(m.options.port) + " (" + why + ")");
  }
  m.port = port;
  m.started = true;
  m.thread = std::thread([&m] {
    if (!m.svr.listen_after_bind()) MOE_LOG_ERROR("worker endpoint: the listener stopped with an error");
  });
  for (int i = 0; i < 5000 && !m.svr.is_running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return ok_status();
}

int WorkerEndpoint::port() const { return impl_->port; }

int WorkerEndpoint::open_streams() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return static_cast<int>(impl_->open.size());
}

void WorkerEndpoint::stop() {
  Impl& m = *impl_;
  std::lock_guard<std::mutex> serial(m.stop_mu);  // a second caller waits for the first
  if (!m.started || m.stopped) return;
  m.stopped = true;
  {
    std::lock_guard<std::mutex> lock(m.mu);
    m.cutting = true;
    for (auto& [id, q] : m.open) q->cut();
  }
  m.svr.stop();
  if (m.thread.joinable()) m.thread.join();
}

bool process_alive(pid_t pid) {
  if (pid <= 0) return false;
  if (::kill(pid, 0) != 0 && errno != EPERM) return false;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return true;  // no procfs: kill() said it exists
  // "pid (comm) S ...": the state follows the last ')'.
  const size_t close = line.rfind(')');
  if (close == std::string::npos || close + 2 >= line.size()) return true;
  const char state = line[close + 2];
  return state != 'Z' && state != 'X';
}

SupervisorWatch::SupervisorWatch(pid_t supervisor_pid, int interval_ms, std::function<void()> on_gone) {
  if (supervisor_pid <= 0) return;
  thread_ = std::thread([this, supervisor_pid, interval_ms, on_gone = std::move(on_gone)] {
    while (!quit_.load()) {
      if (!process_alive(supervisor_pid)) {
        if (on_gone) {
          on_gone();
          return;
        }
        std::fprintf(stderr, "worker %d: supervisor %d is gone, exiting\n", static_cast<int>(::getpid()),
                     static_cast<int>(supervisor_pid));
        std::fflush(stderr);
        ::_exit(3);
      }
      for (int waited = 0; waited < interval_ms && !quit_.load(); waited += 10) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
  });
}

SupervisorWatch::~SupervisorWatch() {
  quit_ = true;
  if (thread_.joinable()) thread_.join();
}

}  // namespace moe::supervisor
