// Charts, part two: the Drawing painted by cairo onto a PNG and an SVG surface with the same
// calls, so the files agree; text by pango in DejaVu Sans Mono (its 0.6 em is layout_chart's 6 px
// a character), falling back for scripts it lacks. Not for: choosing what is drawn (plot.cpp).
#include "dptrain/tools/plot.h"

#include "dptrain/core/error.h"

#include <cairo-svg.h>
#include <cairo.h>
#include <pango/pangocairo.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <memory>

namespace dptrain {

namespace {

void set_colour(cairo_t* cr, Rgb c) { cairo_set_source_rgb(cr, c.r / 255.0, c.g / 255.0, c.b / 255.0); }

// Baseline at the anchor (start, middle or end); vertical text reads upwards about it.
void paint_text(cairo_t* cr, const Shape& s) {
    PangoLayout* layout = pango_cairo_create_layout(cr);
    PangoFontDescription* font = pango_font_description_from_string("DejaVu Sans Mono");
    pango_font_description_set_absolute_size(font, 10.0 * s.scale * PANGO_SCALE);
    pango_layout_set_font_description(layout, font);
    pango_layout_set_text(layout, s.text.c_str(), -1);
    PangoRectangle logical;
    pango_layout_get_pixel_extents(layout, nullptr, &logical);
    const double baseline = pango_layout_get_baseline(layout) / (double)PANGO_SCALE;
    const double shift = s.anchor == Shape::Anchor::start ? 0 : s.anchor == Shape::Anchor::middle ? logical.width / 2.0
                                                                                                    : logical.width;
    cairo_save(cr);
    cairo_translate(cr, s.pts[0], s.pts[1]);
    if (s.vertical) cairo_rotate(cr, -M_PI / 2);
    cairo_move_to(cr, -shift, -baseline);
    set_colour(cr, s.colour);
    pango_cairo_show_layout(cr, layout);
    cairo_restore(cr);
    pango_font_description_free(font);
    g_object_unref(layout);
}

void paint(cairo_t* cr, const Drawing& d) {
    cairo_set_line_cap(cr, CAIRO_LINE_CAP_ROUND);
    cairo_set_line_join(cr, CAIRO_LINE_JOIN_ROUND);
    for (const Shape& s : d.shapes) {
        const std::vector<double>& p = s.pts;
        switch (s.kind) {
        case Shape::Kind::rect:
            set_colour(cr, s.colour);
            cairo_rectangle(cr, p[0], p[1], p[2], p[3]);
            cairo_fill(cr);
            break;
        case Shape::Kind::line:
        case Shape::Kind::polyline:
            set_colour(cr, s.colour);
            cairo_set_line_width(cr, s.stroke);
            cairo_move_to(cr, p[0], p[1]);
            for (size_t k = 2; k + 1 < p.size(); k += 2) cairo_line_to(cr, p[k], p[k + 1]);
            cairo_stroke(cr);
            break;
        case Shape::Kind::circle:
            set_colour(cr, s.colour);
            cairo_arc(cr, p[0], p[1], p[2], 0, 2 * M_PI);
            cairo_fill(cr);
            break;
        case Shape::Kind::text: paint_text(cr, s); break;
        }
    }
}

cairo_status_t append(void* closure, const unsigned char* data, unsigned int length) {
    static_cast<std::string*>(closure)->append(reinterpret_cast<const char*>(data), length);
    return CAIRO_STATUS_SUCCESS;
}

using Surface = std::unique_ptr<cairo_surface_t, decltype(&cairo_surface_destroy)>;

// finish: end the surface too (SVG writes its document then; PNG is written after, unfinished).
void paint_onto(cairo_surface_t* surface, const Drawing& d, bool finish) {
    cairo_t* cr = cairo_create(surface);
    paint(cr, d);
    const cairo_status_t st = cairo_status(cr);
    cairo_destroy(cr);
    if (finish) cairo_surface_finish(surface);
    if (st != CAIRO_STATUS_SUCCESS || cairo_surface_status(surface) != CAIRO_STATUS_SUCCESS)
        throw UserError(strfmt("chart: cairo could not draw it: %s", cairo_status_to_string(st)));
}

void write_file(const std::string& path, const std::string& bytes) {
    FILE* f = std::fopen(path.c_str(), "wb");
    if (!f) throw UserError(strfmt("%s: cannot write it: %s", path.c_str(), std::strerror(errno)));
    bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
    ok = std::fclose(f) == 0 && ok;
    if (!ok) throw UserError(strfmt("%s: write failed: %s", path.c_str(), std::strerror(errno)));
}

} // namespace

std::string render_svg(const Drawing& d) {
    std::string out;
    Surface s(cairo_svg_surface_create_for_stream(append, &out, d.width, d.height), cairo_surface_destroy);
    cairo_svg_surface_restrict_to_version(s.get(), CAIRO_SVG_VERSION_1_1);
    paint_onto(s.get(), d, true);
    return out;
}

std::string render_png(const Drawing& d) {
    Surface s(cairo_image_surface_create(CAIRO_FORMAT_RGB24, d.width, d.height), cairo_surface_destroy);
    paint_onto(s.get(), d, false);
    std::string out;
    const cairo_status_t st = cairo_surface_write_to_png_stream(s.get(), append, &out);
    if (st != CAIRO_STATUS_SUCCESS) throw UserError(strfmt("chart: cairo could not write the PNG: %s", cairo_status_to_string(st)));
    return out;
}

std::vector<std::string> write_chart(const Chart& chart, const std::string& path_stem) {
    const Drawing d = layout_chart(chart);
    write_file(path_stem + ".svg", render_svg(d));
    write_file(path_stem + ".png", render_png(d));
    return {path_stem + ".svg", path_stem + ".png"};
}

} // namespace dptrain
