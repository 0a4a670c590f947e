// Cross-origin resource sharing (CORS) for the HTTP server, off by default. With
// allowed origins configured (`moe serve --allowed-origins`, as vLLM's flags):
//   - a preflight (OPTIONS with Origin and Access-Control-Request-Method) from an
//     allowed origin, for an allowed method, gets 204 with Access-Control-Allow-Origin,
//     -Allow-Methods, -Allow-Headers, -Max-Age (600 s), Vary: Origin (and
//     -Allow-Credentials: true with allow_credentials); from a disallowed origin or for a
//     disallowed method, 400 with no CORS headers;
//   - any other response to a request with an allowed Origin gets
//     Access-Control-Allow-Origin ("*" when every origin is allowed and credentials are
//     not, else the origin itself, with Vary: Origin); a disallowed origin gets nothing.
// Origins compare exactly (scheme://host[:port]); "*" allows every origin. Methods and
// headers compare case-insensitively; "*" allows all (headers: the requested ones are
// echoed). Immutable after construction: thread-safe.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "moe/status.h"

namespace moe::serve {

struct CorsOptions {
  std::vector<std::string> allowed_origins;           // empty = CORS off
  std::vector<std::string> allowed_methods = {"*"};   // e.g. {"GET", "POST"}
  std::vector<std::string> allowed_headers = {"*"};   // e.g. {"Authorization", "Content-Type"}
  bool allow_credentials = false;
};

using HeaderList = std::vector<std::pair<std::string, std::string>>;

class CorsPolicy {
 public:
  CorsPolicy() = default;  // off
  // InvalidArgument naming the flag for an empty entry or a method that is not a token.
  static StatusOr<CorsPolicy> create(CorsOptions options);
  bool enabled() const { return !options_.allowed_origins.empty(); }

  struct Preflight {
    int status = 204;
    HeaderList headers;  // empty when refused
    std::string error;   // why refused (status 400)
  };
  // For a request that is a preflight (enabled, OPTIONS, Origin and
  // Access-Control-Request-Method present): the answer; nullopt otherwise.
  std::optional<Preflight> preflight(const std::string& method, const std::string& origin,
                                     const std::string& request_method, const std::string& request_headers) const;
  // Headers to add to a (non-preflight) response to a request with `origin` (empty:
  // none sent); empty when CORS is off or the origin is not allowed.
  HeaderList response_headers(const std::string& origin) const;

 private:
  bool origin_allowed(const std::string& origin) const;
  CorsOptions options_;
  bool any_origin_ = false, any_method_ = false, any_header_ = false;
};

// "a,b" and repeated flags -> {"a", "b"} (entries trimmed, empty ones dropped).
std::vector<std::string> split_comma_list(const std::vector<std::string>& values);

}  // namespace moe::serve
