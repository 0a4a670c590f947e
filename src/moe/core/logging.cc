#include "moe/core/logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>

namespace moe {

bool init_logging(const std::string& level) {
  auto lvl = spdlog::level::from_str(level);
  if (lvl == spdlog::level::off && level != "off") return false;
  auto logger = spdlog::get("moe");
  if (!logger) logger = spdlog::stderr_color_mt("moe");
  logger->set_pattern("[%H:%M:%S.%e] [%^%l%$] %v");
  logger->set_level(lvl);
  spdlog::set_default_logger(logger);
  return true;
}

}  // namespace moe
