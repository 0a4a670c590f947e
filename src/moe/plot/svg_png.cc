#include "moe/plot/svg_png.h"

#include <cairo.h>
#include <librsvg/rsvg.h>

#include <cmath>
#include <cstdio>
#include <memory>

namespace moe {

namespace {

struct GErrorFree {
  void operator()(GError* e) const { g_error_free(e); }
};
struct ObjectUnref {
  void operator()(RsvgHandle* h) const { g_object_unref(h); }
};
struct SurfaceDestroy {
  void operator()(cairo_surface_t* s) const { cairo_surface_destroy(s); }
};
struct CairoDestroy {
  void operator()(cairo_t* c) const { cairo_destroy(c); }
};

}  // namespace

Status write_svg_as_png(const std::string& svg, const std::string& path) {
  GError* raw_error = nullptr;
  std::unique_ptr<RsvgHandle, ObjectUnref> handle(
      rsvg_handle_new_from_data(reinterpret_cast<const guint8*>(svg.data()), svg.size(), &raw_error));
  std::unique_ptr<GError, GErrorFree> error(raw_error);
  if (handle == nullptr) {
    return invalid_argument("cannot render the chart for " + path + ": " +
                            (error ? std::string(error->message) : std::string("librsvg could not parse the SVG")));
  }
  gdouble w = 0, h = 0;
  if (!rsvg_handle_get_intrinsic_size_in_pixels(handle.get(), &w, &h) || !(w >= 1 && h >= 1) || w > 20000 ||
      h > 20000) {
    return invalid_argument("cannot render the chart for " + path + ": the SVG has no usable pixel size");
  }
  const int width = static_cast<int>(std::ceil(w)), height = static_cast<int>(std::ceil(h));
  std::unique_ptr<cairo_surface_t, SurfaceDestroy> surface(cairo_image_surface_create(CAIRO_FORMAT_ARGB32, width, height));
  std::unique_ptr<cairo_t, CairoDestroy> cr(cairo_create(surface.get()));
  cairo_set_source_rgb(cr.get(), 1, 1, 1);
  cairo_paint(cr.get());
  const RsvgRectangle viewport{0, 0, w, h};
  GError* render_raw = nullptr;
  if (!rsvg_handle_render_document(handle.get(), cr.get(), &viewport, &render_raw)) {
    std::unique_ptr<GError, GErrorFree> render_error(render_raw);
    return invalid_argument("cannot render the chart for " + path + ": " +
                            (render_error ? std::string(render_error->message) : std::string("librsvg failed")));
  }
  cairo_surface_flush(surface.get());
  const std::string tmp = path + ".tmp";
  if (cairo_surface_write_to_png(surface.get(), tmp.c_str()) != CAIRO_STATUS_SUCCESS) {
    std::remove(tmp.c_str());
    return internal_error("cannot write the PNG file " + path);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return internal_error("cannot write the PNG file " + path + " (rename failed)");
  }
  return ok_status();
}

}  // namespace moe
