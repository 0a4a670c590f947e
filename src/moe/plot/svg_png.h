// PNG pictures of the SVG charts (`moe stats plot --png`, `moe trace summarize --png`):
// an SVG document rendered by librsvg onto a cairo image surface at the document's own
// width and height (pixels), white background, written as a PNG (Debian librsvg2-dev).
#pragma once

#include <string>

#include "moe/status.h"

namespace moe {

// Renders `svg` and writes the PNG to `path` (a temporary file renamed into place: on
// failure an old file is untouched). Errors: InvalidArgument when librsvg cannot parse
// the SVG or it has no size; Internal naming `path` when writing fails;
// FailedPrecondition naming the build option in a build without librsvg (MOE_WITH_RSVG).
Status write_svg_as_png(const std::string& svg, const std::string& path);

}  // namespace moe
