// PNG output in a build without librsvg and cairo (-DMOE_WITH_RSVG=OFF): refused by name.
#include "moe/plot/svg_png.h"

namespace moe {

Status write_svg_as_png(const std::string&, const std::string& path) {
  return Status(StatusCode::kFailedPrecondition,
                path + ": PNG output needs librsvg and cairo, and this build has none (it was configured with "
                       "-DMOE_WITH_RSVG=OFF): write an .svg instead, or install librsvg2-dev and rebuild with "
                       "-DMOE_WITH_RSVG=ON");
}

}  // namespace moe
