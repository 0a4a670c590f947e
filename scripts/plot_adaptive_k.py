#!/usr/bin/env python3
"""Plots held-out NLL against all-to-all bytes for adaptive top-k runs of `moe bench
perplexity --json` (docs/performance.md, "Adaptive top-k"). Writes OUT.svg, and OUT.png
through librsvg + cairo (Debian librsvg2-2, libcairo2; loaded with ctypes) when present.

usage: /usr/bin/python3 scripts/plot_adaptive_k.py OUT LABEL=RUN.json ...
The first run is the baseline (100% bytes). X: a2a_bytes_rank0 relative to it (falls
back to expert assignments when the runs had no EP); Y: nll.
"""
import ctypes
import json
import sys
from xml.sax.saxutils import escape

W, H, L, R, T, B = 720, 440, 80, 30, 50, 60


def main():
    out = sys.argv[1]
    runs = []
    for arg in sys.argv[2:]:
        label, path = arg.rsplit("=", 1)
        runs.append((label, json.load(open(path))))
    key = "a2a_bytes_rank0" if all(r["a2a_bytes_rank0"] > 0 for _, r in runs) else "assignments"
    base = runs[0][1][key]
    pts = [(label, 100.0 * r[key] / base, r["nll"]) for label, r in runs]
    xs = [p[1] for p in pts]
    ys = [p[2] for p in pts]
    x0, x1 = min(xs) - 5, max(xs) + 5
    yr = max(ys) - min(ys) or 0.1
    y0, y1 = min(ys) - 0.1 * yr, max(ys) + 0.15 * yr

    def px(x):
        return L + (x - x0) / (x1 - x0) * (W - L - R)

    def py(y):
        return H - B - (y - y0) / (y1 - y0) * (H - T - B)

    s = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="13">' % (W, H),
         '<rect width="100%" height="100%" fill="white"/>',
         '<text x="%d" y="28" font-size="16">Adaptive top-k, tiny Mixtral (held-out Tiny Shakespeare)</text>' % L]
    for i in range(6):  # grid and ticks
        gx = x0 + i * (x1 - x0) / 5
        gy = y0 + i * (y1 - y0) / 5
        s.append('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/>' % (px(gx), T, px(gx), H - B))
        s.append('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>' % (L, py(gy), W - R, py(gy)))
        s.append('<text x="%.1f" y="%d" text-anchor="middle">%.0f%%</text>' % (px(gx), H - B + 18, gx))
        s.append('<text x="%d" y="%.1f" text-anchor="end">%.3f</text>' % (L - 6, py(gy) + 4, gy))
    s.append('<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="black"/>' % (L, T, W - L - R, H - T - B))
    what = "all-to-all bytes sent (rank 0)" if key == "a2a_bytes_rank0" else "expert assignments run"
    s.append('<text x="%d" y="%d" text-anchor="middle">%s, %% of k = 2</text>' % ((L + W - R) // 2, H - 18, what))
    s.append('<text transform="translate(20,%d) rotate(-90)" text-anchor="middle">NLL (nats/token)</text>' % ((T + H - B) // 2))
    line = " ".join("%.1f,%.1f" % (px(x), py(y)) for _, x, y in sorted(pts[2:], key=lambda p: -p[1]))
    if line:
        s.append('<polyline points="%s" fill="none" stroke="#1f77b4" stroke-width="1.5"/>' % line)
    for i, (label, x, y) in enumerate(pts):
        color = "#d62728" if i < 2 else "#1f77b4"
        s.append('<circle cx="%.1f" cy="%.1f" r="5" fill="%s"/>' % (px(x), py(y), color))
        dy = 20 if i == 0 else -8  # the baseline's label below its point (adaptive runs crowd it from above)
        s.append('<text x="%.1f" y="%.1f">%s</text>' % (px(x) + 8, py(y) + dy, escape(label)))
    s.append("</svg>")
    open(out + ".svg", "w").write("\n".join(s) + "\n")
    try:
        rsvg = ctypes.CDLL("librsvg-2.so.2")
        cairo = ctypes.CDLL("libcairo.so.2")
    except OSError as e:
        print("wrote %s.svg (no PNG: %s)" % (out, e))
        return
    rsvg.rsvg_handle_new_from_file.restype = ctypes.c_void_p
    cairo.cairo_image_surface_create.restype = ctypes.c_void_p
    cairo.cairo_create.restype = ctypes.c_void_p
    handle = rsvg.rsvg_handle_new_from_file((out + ".svg").encode(), None)
    surface = cairo.cairo_image_surface_create(0, W, H)  # CAIRO_FORMAT_ARGB32
    cr = cairo.cairo_create(ctypes.c_void_p(surface))
    rsvg.rsvg_handle_render_cairo(ctypes.c_void_p(handle), ctypes.c_void_p(cr))
    cairo.cairo_surface_write_to_png(ctypes.c_void_p(surface), (out + ".png").encode())
    print("wrote %s.svg and %s.png" % (out, out))


if __name__ == "__main__":
    main()
