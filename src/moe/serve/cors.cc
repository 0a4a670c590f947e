#include "moe/serve/cors.h"

#include <algorithm>
#include <cctype>

namespace moe::serve {
namespace {

constexpr const char* kAllMethods = "DELETE, GET, HEAD, OPTIONS, PATCH, POST, PUT";
constexpr int kMaxAgeSeconds = 600;

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

std::string trim(const std::string& s) {
  size_t a = 0, b = s.size();
  while (a < b && std::isspace(static_cast<unsigned char>(s[a]))) ++a;
  while (b > a && std::isspace(static_cast<unsigned char>(s[b - 1]))) --b;
  return s.substr(a, b - a);
}

bool contains_ci(const std::vector<std::string>& list, const std::string& v) {
  const std::string lv = lower(v);
  return std::any_of(list.begin(), list.end(), [&](const std::string& x) { return lower(x) == lv; });
}

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (const std::string& s : v) out += (out.empty() ? "" : ", ") + s;
  return out;
}

}  // namespace

std::vector<std::string> split_comma_list(const std::vector<std::string>& values) {
  std::vector<std::string> out;
  for (const std::string& v : values) {
    size_t start = 0;
    while (start <= v.size()) {
      const size_t comma = std::min(v.find(',', start), v.size());
      std::string item = trim(v.substr(start, comma - start));
      if (!item.empty()) out.push_back(std::move(item));
      start = comma + 1;
    }
  }
  return out;
}

StatusOr<CorsPolicy> CorsPolicy::create(CorsOptions o) {
  for (const std::string& m : o.allowed_methods) {
    const bool token = !m.empty() && std::all_of(m.begin(), m.end(), [](unsigned char c) { return std::isalpha(c) || c == '*'; });
    if (!token) return invalid_argument("--allowed-methods: '" + m + "' is not an HTTP method (or *)");
  }
  for (const std::string& h : o.allowed_headers) {
    if (h.empty()) return invalid_argument("--allowed-headers: empty header name");
  }
  for (const std::string& origin : o.allowed_origins) {
    if (origin.empty()) return invalid_argument("--allowed-origins: empty origin");
  }
  CorsPolicy p;
  p.any_origin_ = std::find(o.allowed_origins.begin(), o.allowed_origins.end(), "*") != o.allowed_origins.end();
  p.any_method_ = std::find(o.allowed_methods.begin(), o.allowed_methods.end(), "*") != o.allowed_methods.end();
  p.any_header_ = std::find(o.allowed_headers.begin(), o.allowed_headers.end(), "*") != o.allowed_headers.end();
  p.options_ = std::move(o);
  return p;
}

bool CorsPolicy::origin_allowed(const std::string& origin) const {
  if (!enabled() || origin.empty()) return false;
  if (any_origin_) return true;
  return std::find(options_.allowed_origins.begin(), options_.allowed_origins.end(), origin) !=
         options_.allowed_origins.end();
}

std::optional<CorsPolicy::Preflight> CorsPolicy::preflight(const std::string& method, const std::string& origin,
                                                           const std::string& request_method,
                                                           const std::string& request_headers) const {
  if (!enabled() || method != "OPTIONS" || origin.empty() || request_method.empty()) return std::nullopt;
  Preflight p;
  if (!origin_allowed(origin)) {
    p.status = 400;
    p.error = "disallowed CORS origin: " + origin;
    return p;
  }
  if (!any_method_ && !contains_ci(options_.allowed_methods, request_method)) {
    p.status = 400;
    p.error = "disallowed CORS method: " + request_method;
    return p;
  }
  std::vector<std::string> asked = split_comma_list({request_headers});
  if (!any_header_) {
    for (const std::string& h : asked) {
      if (!contains_ci(options_.allowed_headers, h)) {
        p.status = 400;
        p.error = "disallowed CORS header: " + h;
        return p;
      }
    }
  }
  p.status = 204;
  p.headers = response_headers(origin);
  p.headers.emplace_back("Access-Control-Allow-Methods", any_method_ ? kAllMethods : join(options_.allowed_methods));
  const std::string headers = any_header_ ? join(asked) : join(options_.allowed_headers);
  if (!headers.empty()) p.headers.emplace_back("Access-Control-Allow-Headers", headers);
  p.headers.emplace_back("Access-Control-Max-Age", std::to_string(kMaxAgeSeconds));
  return p;
}

HeaderList CorsPolicy::response_headers(const std::string& origin) const {
  HeaderList h;
  if (!origin_allowed(origin)) return h;
  if (any_origin_ && !options_.allow_credentials) {
    h.emplace_back("Access-Control-Allow-Origin", "*");
  } else {
    h.emplace_back("Access-Control-Allow-Origin", origin);
    h.emplace_back("Vary", "Origin");
  }
  if (options_.allow_credentials) h.emplace_back("Access-Control-Allow-Credentials", "true");
  return h;
}

}  // namespace moe::serve
