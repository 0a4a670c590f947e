// moe serve: the OpenAI-compatible HTTP server (src/moe/serve/) over the continuous-
// batching Scheduler. Rank 0 serves HTTP on a background thread and steps the engine on
// the main thread; under mpirun the other ranks join every step (Engine::run_worker).
// SIGTERM / SIGINT: stop taking requests (/health 503), let those in flight finish for
// up to --shutdown-grace seconds, then exit 0; a second signal aborts them at once.
// --supervise (serve_supervise_cmd.cc) runs the engine in a worker group it restarts
// after a failure; the worker group runs `moe serve --worker-endpoint DIR`.
#include <signal.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "commands.h"
#include "engine_flags.h"
#include "moe/core/text_format.h"
#include "moe/launch.h"
#include "moe/scheduler.h"
#include "moe/serve/chat_template.h"
#include "moe/serve/http_server.h"
#include "moe/serve/serve_loop.h"
#include "serve_cmd.h"

namespace moe::cli {

static serve::CorsOptions cors_options(const ServeFlags& f) {
  serve::CorsOptions c;
  c.allowed_origins = serve::split_comma_list(f.allowed_origins);
  if (!f.allowed_methods.empty()) c.allowed_methods = serve::split_comma_list(f.allowed_methods);
  if (!f.allowed_headers.empty()) c.allowed_headers = serve::split_comma_list(f.allowed_headers);
  c.allow_credentials = f.allowed_credentials;
  return c;
}

std::string check_serve_flags(const ServeFlags& f, bool check_engine) {
  if (f.host.empty()) return "--host must not be empty";
  if (f.port < 0 || f.port > 65535) return "--port must be in [0, 65535] (got " + std::to_string(f.port) + ")";
  for (const std::string& key : f.api_keys) {
    if (key.empty()) return "--api-key must not be empty";
  }
  if (f.max_num_seqs < 1) return "--max-num-seqs must be >= 1 (got " + std::to_string(f.max_num_seqs) + ")";
  if (f.max_num_batched_tokens < 1) {
    return "--max-num-batched-tokens must be >= 1 (got " + std::to_string(f.max_num_batched_tokens) + ")";
  }
  if (f.max_num_batched_tokens < f.max_num_seqs) {
    return "--max-num-batched-tokens (" + std::to_string(f.max_num_batched_tokens) + ") must be >= --max-num-seqs (" +
           std::to_string(f.max_num_seqs) + "): every running sequence decodes one token per step";
  }
  if (f.kv_block_size < 1) return "--kv-block-size must be >= 1 (got " + std::to_string(f.kv_block_size) + ")";
  if (f.kv_cache_tokens < 0) return "--kv-cache-tokens must be >= 0 (got " + std::to_string(f.kv_cache_tokens) + ")";
  if (f.kv_cache_tokens > 0 && f.kv_cache_tokens < f.kv_block_size) {
    return "--kv-cache-tokens (" + std::to_string(f.kv_cache_tokens) + ") is smaller than one block of --kv-block-size " +
           std::to_string(f.kv_block_size) + " tokens";
  }
  if (f.kv_cache_memory_bytes < 0) {
    return "--kv-cache-memory-bytes must be >= 0 (got " + std::to_string(f.kv_cache_memory_bytes) + ")";
  }
  if (f.kv_cache_memory_bytes > 0 && f.kv_cache_tokens > 0) {
    return "--kv-cache-tokens and --kv-cache-memory-bytes both size the KV cache: give one";
  }
  if (!(f.memory_utilization > 0 && f.memory_utilization <= 1)) {
    return "--memory-utilization must be in (0, 1] (got " + std::to_string(f.memory_utilization) + ")";
  }
  if (f.enable_prefix_caching && f.no_enable_prefix_caching) {
    return "--enable-prefix-caching and --no-enable-prefix-caching contradict each other";
  }
  if (f.kv_reserve_max_tokens && !f.no_enable_prefix_caching) {
    return "--kv-reserve-max-tokens needs --no-enable-prefix-caching (reserved worst cases and shared prefix blocks "
           "do not mix)";
  }
  if (f.kv_offload_bytes < 0) return "--kv-offload-bytes must be >= 0 (got " + std::to_string(f.kv_offload_bytes) + ")";
  if (f.kv_offload_bytes > 0 && f.kv_offload_dir.empty()) return "--kv-offload-bytes needs --kv-offload-dir";
  if (!f.kv_offload_dir.empty() && f.no_enable_prefix_caching) {
    return "--kv-offload-dir needs prefix caching (it holds cached prefix blocks): drop --no-enable-prefix-caching";
  }
  if (f.max_tokens_limit < 0) {
    return "--max-tokens-limit must be >= 0 (got " + std::to_string(f.max_tokens_limit) + ")";
  }
  if (f.max_n < 1) return "--max-n must be >= 1 (got " + std::to_string(f.max_n) + ")";
  if (f.max_body_bytes < 1) return "--max-body-bytes must be >= 1 (got " + std::to_string(f.max_body_bytes) + ")";
  if (!(f.rate_limit_rps >= 0 && std::isfinite(f.rate_limit_rps))) {
    return "--rate-limit-rps must be a finite number >= 0 (got " + std::to_string(f.rate_limit_rps) + ")";
  }
  if (!(f.rate_limit_tpm >= 0 && std::isfinite(f.rate_limit_tpm))) {
    return "--rate-limit-tpm must be a finite number >= 0 (got " + std::to_string(f.rate_limit_tpm) + ")";
  }
  if (!(f.shutdown_grace >= 0 && std::isfinite(f.shutdown_grace))) {
    return "--shutdown-grace must be a finite number of seconds >= 0 (got " + std::to_string(f.shutdown_grace) + ")";
  }
  // Slow clients (connection_gate.h).
  if (!(f.header_timeout > 0 && std::isfinite(f.header_timeout))) {
    return "--header-timeout must be a finite number of seconds > 0 (got " + format_g(f.header_timeout) + ")";
  }
  if (f.max_connections_per_client < 0) {
    return "--max-connections-per-client must be >= 0 (got " + std::to_string(f.max_connections_per_client) + ")";
  }
  if (auto cors = serve::CorsPolicy::create(cors_options(f)); !cors.ok()) return cors.status().message();
  if (check_engine) {
    if (std::string bad = check_engine_flags(f.engine); !bad.empty()) return bad;
  }
  if (!(f.liveness_timeout > 0 && std::isfinite(f.liveness_timeout))) {
    return "--liveness-timeout must be a finite number of seconds > 0 (got " + format_g(f.liveness_timeout) + ")";
  }
  if (f.engine.launch.comm_backend != "gloo" && f.effective_liveness_timeout() >= f.engine.launch.comm_timeout_seconds) {
    return "--liveness-timeout (" + format_g(f.liveness_timeout) + ") must be below --comm-timeout (" +
           format_g(f.engine.launch.comm_timeout_seconds) + ")";
  }
  // --supervise --comm-backend gloo: a failover pauses a step for up to --comm-timeout (a
  // stopped peer) plus the --failover-join window; a shorter liveness timeout would have
  // the supervisor replace the group in the middle of every failover.
  const double failover_pause = f.engine.launch.comm_timeout_seconds + f.engine.options.failover_join_seconds;
  if (f.supervise && f.engine.launch.comm_backend == "gloo" && f.effective_liveness_timeout() <= failover_pause) {
    return "--liveness-timeout (" + format_g(f.liveness_timeout) + ") must be above --comm-timeout + --failover-join (" +
           format_g(failover_pause) + " s) with --supervise --comm-backend gloo: a failover pauses a step that long, "
           "and the supervisor would replace the group in the middle of it";
  }
  return "";
}

serve::ServerOptions server_options(const ServeFlags& f, const serve::ChatTemplate& chat_template) {
  serve::ServerOptions o;
  o.host = f.host;
  o.port = f.port;
  o.api_keys = f.api_keys;
  o.served_model_name = f.served_model_name;
  o.max_body_bytes = static_cast<size_t>(f.max_body_bytes);
  o.max_tokens_limit = f.max_tokens_limit;
  o.max_n = f.max_n;
  o.rate_limits.requests_per_second = f.rate_limit_rps;
  o.rate_limits.tokens_per_minute = f.rate_limit_tpm;
  o.chat_template = chat_template;
  o.cors = cors_options(f);
  o.header_timeout_seconds = f.header_timeout;
  o.max_connections_per_client = static_cast<size_t>(f.max_connections_per_client);
  return o;
}

SchedulerOptions scheduler_options(const ServeFlags& f) {
  SchedulerOptions so;
  so.max_num_seqs = f.max_num_seqs;
  so.max_num_batched_tokens = f.max_num_batched_tokens;
  so.kv_block_size = f.kv_block_size;
  so.kv_cache_tokens = f.kv_cache_tokens;
  so.kv_cache_memory_bytes = static_cast<uint64_t>(f.kv_cache_memory_bytes);
  so.memory_utilization = f.memory_utilization;
  so.enable_prefix_caching = !f.no_enable_prefix_caching;
  so.reserve_max_tokens = f.kv_reserve_max_tokens;
  so.kv_offload_dir = f.kv_offload_dir;
  if (f.kv_offload_bytes > 0) so.kv_offload_bytes = static_cast<uint64_t>(f.kv_offload_bytes);
  so.idle_heartbeat_seconds = f.engine.idle_heartbeat_seconds();
  so.liveness_timeout_seconds = f.effective_liveness_timeout();
  return so;
}

int run_serve_worker_rank(Engine& engine, int rank, const std::string& trace_path) {
  ::signal(SIGTERM, SIG_IGN);
  ::signal(SIGINT, SIG_IGN);
  Status st = engine.run_worker();
  if (!st.ok()) return fail_rank(rank, st);
  return write_trace_or_fail(engine, rank, trace_path);
}

namespace {

int serve_on_rank0(const ServeFlags& f, Engine& engine);

int run_serve(const ServeFlags& f, const CLI::App& app) {
  if (std::string bad = check_supervise_flags(f); !bad.empty()) return fail(bad);
  if (f.supervise) return run_supervised_serve(f, app);
  if (!f.worker_endpoint.empty()) return run_worker_endpoint(f);
  if (std::string bad = check_serve_flags(f, /*check_engine=*/true); !bad.empty()) return fail(bad);
  // An explicit --chat-template is checked before the (maybe long) model load.
  if (!f.chat_template.empty()) {
    auto t = serve::ChatTemplate::select(f.chat_template, "", "");
    if (!t.ok()) return fail("--chat-template: " + t.status().message());
  }
  auto opened = launch_engine_from_flags(f.engine, "serve");
  if (!opened.ok()) return fail_rank(-1, opened.status());
  Engine& engine = *opened.value().engine;
  const int rank = opened.value().rank;
  if (rank != 0) return run_serve_worker_rank(engine, rank, f.engine.options.trace_path);
  int rc = 0;
  {
    StopWorkersOnExit stop_workers{&engine};
    rc = serve_on_rank0(f, engine);
  }
  // --trace: every rank joins the gather once the workers are released.
  const int trace_rc = write_trace_or_fail(engine, rank, f.engine.options.trace_path);
  return rc != 0 ? rc : trace_rc;
}

int serve_on_rank0(const ServeFlags& f, Engine& engine) {
  const int rank = 0;

  const ModelInfo& info = engine.info();
  if (f.max_tokens_limit > info.max_context) {
    return fail("--max-tokens-limit " + std::to_string(f.max_tokens_limit) + " exceeds the model's context of " +
                std::to_string(info.max_context) + " tokens");
  }
  auto chat_template = serve::ChatTemplate::select(f.chat_template, info.model_dir, info.model_type);
  if (!chat_template.ok()) {
    return fail((f.chat_template.empty() ? "chat template: " : "--chat-template: ") + chat_template.status().message());
  }

  auto scheduler_or = Scheduler::create(&engine, scheduler_options(f));
  if (!scheduler_or.ok()) return fail(scheduler_or.status().message());
  Scheduler& scheduler = *scheduler_or.value();

  const serve::ServerOptions o = server_options(f, chat_template.value());
  serve::HttpServer server(scheduler, o);
  serve::ServeLoopOptions loop;
  loop.shutdown_grace_seconds = f.shutdown_grace;
  loop.on_started = [&](const serve::HttpServer& s) {
    std::fprintf(stderr, "serving %s on http://%s:%d (chat template: %s)\n", s.served_model_name().c_str(),
                 f.host.c_str(), s.port(), o.chat_template.name().c_str());
    std::fflush(stderr);
  };
  const serve::ServeLoopResult result = serve::serve_until_shutdown(
      server, {[&] { return scheduler.run(); }, [&](double grace) { scheduler.shutdown(grace); }}, loop);
  if (!result.start.ok()) return fail("--host/--port: " + result.start.message());
  // The HTTP server has answered every request in flight (errors included) by now.
  if (!result.run.ok()) return fail_rank(rank, result.run);
  std::fprintf(stderr, "stopped\n");
  return 0;
}

}  // namespace

RunFn add_serve_command(CLI::App& app) {
  auto f = std::make_shared<ServeFlags>();
  add_engine_flags(app, &f->engine, /*batch_invariant_default=*/true);
  app.add_option("--host", f->host, "Address to listen on")->capture_default_str();
  app.add_option("--port", f->port, "TCP port; 0 = a free one (printed)")->capture_default_str();
  app.add_option("--api-key", f->api_keys,
                 "Require 'Authorization: Bearer KEY' on /v1/* (repeat for several keys)")
      ->allow_extra_args(false);
  app.add_option("--served-model-name", f->served_model_name,
                 "The model name clients must send; default: the model directory's name");
  app.add_option("--max-num-seqs", f->max_num_seqs, "Sequences in the running batch at most")->capture_default_str();
  app.add_option("--max-num-batched-tokens", f->max_num_batched_tokens,
                 "Tokens per engine step at most (decodes + prompt chunks)")
      ->capture_default_str();
  app.add_option("--kv-block-size", f->kv_block_size, "Tokens per KV-cache block")->capture_default_str();
  app.add_option("--kv-cache-tokens", f->kv_cache_tokens,
                 "KV-cache pool in tokens; 0 = by --kv-cache-memory-bytes, else max-num-seqs x context within "
                 "--memory-utilization")
      ->capture_default_str();
  app.add_option("--kv-cache-memory-bytes", f->kv_cache_memory_bytes,
                 "KV-cache pool in bytes (instead of --kv-cache-tokens); 0 = sized by memory")
      ->capture_default_str();
  app.add_option("--memory-utilization,--gpu-memory-utilization", f->memory_utilization,
                 "Fraction of the memory this process may use (MemTotal or its cgroup limit) that the weights and "
                 "the KV cache may take together; a pool that does not fit is refused at start")
      ->capture_default_str();
  app.add_flag("--enable-prefix-caching", f->enable_prefix_caching,
               "Automatic prefix caching (the default): a prompt's prefill starts after its longest cached prefix");
  app.add_flag("--no-enable-prefix-caching", f->no_enable_prefix_caching, "Turn automatic prefix caching off");
  app.add_option("--kv-offload-dir", f->kv_offload_dir,
                 "Disk tier of the prefix cache: cached KV blocks are also written here (one verified file per "
                 "block) and read back on a miss, across restarts");
  app.add_option("--kv-offload-bytes", f->kv_offload_bytes,
                 "Bound on --kv-offload-dir's block files (least recently used go first); 0 = 4 GiB")
      ->capture_default_str();
  app.add_flag("--kv-reserve-max-tokens", f->kv_reserve_max_tokens,
               "Reserve each request's prompt + max_tokens of KV at admission (never preempts; holds the worst "
               "case). Default: blocks on demand, preempting (recompute) when they run out");
  app.add_option("--max-tokens-limit", f->max_tokens_limit,
                 "Largest max_tokens a request may ask for; 0 = the model's context")
      ->capture_default_str();
  app.add_option("--max-n", f->max_n, "Largest n (choices per prompt) a request may ask for (more: 400)")
      ->capture_default_str();
  app.add_option("--max-body-bytes", f->max_body_bytes, "Largest request body (bigger: 413)")->capture_default_str();
  app.add_option("--rate-limit-rps", f->rate_limit_rps, "Requests per second per API key (token bucket); 0 = off")
      ->capture_default_str();
  app.add_option("--rate-limit-tpm", f->rate_limit_tpm,
                 "Tokens (prompt + max_tokens) per minute per API key; 0 = off")
      ->capture_default_str();
  // Slow clients: connection_gate.h.
  app.add_option("--header-timeout", f->header_timeout,
                 "Seconds a request's whole head (request line and headers) may take to arrive; slower: closed")
      ->capture_default_str();
  app.add_option("--max-connections-per-client", f->max_connections_per_client,
                 "Connections one client address may hold at once (more: 429 and closed); 0 = no cap")
      ->capture_default_str();
  app.add_option("--chat-template", f->chat_template,
                 "chatml, mistral, plain, or a template file (Jinja, e.g. *.jinja, or the JSON turn format); "
                 "default: tokenizer_config.json's chat_template (Jinja), else by model family");
  app.add_option("--allowed-origins", f->allowed_origins,
                 "CORS: origins (scheme://host[:port]) browsers may call from, comma-separated or repeated; * = any. "
                 "Default: none (CORS off: no CORS headers, OPTIONS is 405)")
      ->allow_extra_args(false);
  app.add_option("--allowed-methods", f->allowed_methods,
                 "CORS: methods a preflight may ask for, comma-separated or repeated (default *)")
      ->allow_extra_args(false);
  app.add_option("--allowed-headers", f->allowed_headers,
                 "CORS: request headers a preflight may ask for, comma-separated or repeated (default *)")
      ->allow_extra_args(false);
  app.add_flag("--allowed-credentials", f->allowed_credentials,
               "CORS: send Access-Control-Allow-Credentials: true (the origin is then echoed, never *)");
  app.add_option("--shutdown-grace", f->shutdown_grace,
                 "Seconds requests in flight may take to finish after SIGTERM/SIGINT")
      ->capture_default_str();
  f->liveness_option = app.add_option(
      "--liveness-timeout", f->liveness_timeout,
      "GET /health answers 503 \"stalled\" while an engine step has run longer than this (seconds; below "
      "--comm-timeout; default min(10, --comm-timeout / 2); --comm-backend gloo: default --comm-timeout + "
      "--failover-join + 2, so that a failover is not taken for a stall); with --supervise also how long the worker "
      "group may not answer before it is replaced");
  add_supervise_flags(app, f.get());
  return [f, &app] { return run_serve(*f, app); };
}

}  // namespace moe::cli
