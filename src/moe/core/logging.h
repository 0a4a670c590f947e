// Logging: spdlog's default logger, writing to stderr with levels.
// Use MOE_LOG_INFO("loaded {} tensors", n) etc. (fmt syntax). Thread-safe.
#pragma once

#include <string>

#include <spdlog/spdlog.h>

#define MOE_LOG_DEBUG(...) ::spdlog::debug(__VA_ARGS__)
#define MOE_LOG_INFO(...) ::spdlog::info(__VA_ARGS__)
#define MOE_LOG_WARN(...) ::spdlog::warn(__VA_ARGS__)
#define MOE_LOG_ERROR(...) ::spdlog::error(__VA_ARGS__)

namespace moe {

// Sends the default logger to stderr with a compact pattern and sets its level.
// level: one of trace, debug, info, warn, error, off. Returns false for an unknown name.
bool init_logging(const std::string& level);

}  // namespace moe
