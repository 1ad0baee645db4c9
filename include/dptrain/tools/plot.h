// Line charts as SVG and PNG: a Chart (series and labels) is laid out once into a Drawing of
// pixel-space shapes, which cairo paints onto both files (pango lays out the text), so the two
// always agree. Not for interactive or general-purpose plotting: one x-y line chart per image,
// linear axes, a fixed palette.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dptrain {

struct Series {
    std::string name;          // legend text
    std::vector<double> x, y;  // the points, joined in this order; non-finite ones are skipped
    bool line = true;          // join the points
    bool markers = false;      // a dot on each point (always for a series of one point)
};

struct Chart {
    std::string title, x_title, y_title;
    int width = 800, height = 450;  // pixels (SVG user units); at least 200x120
    std::vector<Series> series;     // coloured from the palette in this order
    bool y_from_zero = false;       // stretch the y axis down (or up) to 0: rates and times
    std::string message;            // when set, shown in an empty plot instead of the series
};

struct Rgb {
    uint8_t r = 0, g = 0, b = 0;
    bool operator==(const Rgb& o) const { return r == o.r && g == o.g && b == o.b; }
};

// Colour of series i (the palette repeats after 8).
Rgb series_colour(int i);

// A primitive in pixel coordinates, y pointing down; (0, 0) is the top-left corner.
struct Shape {
    enum class Kind { rect, line, polyline, circle, text };
    enum class Anchor { start, middle, end };
    Kind kind = Kind::line;
    Rgb colour;
    // rect: x, y, w, h (filled); line: x0, y0, x1, y1; polyline: x0, y0, x1, y1, ...;
    // circle: cx, cy, r (filled); text: x, y of the anchor point on the baseline.
    std::vector<double> pts;
    double stroke = 1;     // line and polyline width in pixels
    int series = -1;       // the index of the Chart series this shape draws, or -1
    std::string text;      // UTF-8, any script an installed font covers
    int scale = 1;         // text size: 10 * scale pixels
    Anchor anchor = Anchor::start;
    bool vertical = false; // text rotated to read upwards, the anchor point still on its baseline
};

struct Drawing {
    int width = 0, height = 0;
    std::vector<Shape> shapes;  // painted in this order
};

// Text metrics the layout budgets with: each character advances 6*scale pixels (DejaVu Sans
// Mono's 0.6 em at 10*scale); capitals stand about 7*scale above the baseline.
int text_width(const std::string& s, int scale);

// Ticks for an axis over [lo, hi]: round steps (1, 2 or 5 times a power of ten), about
// `target` of them, the first at or below lo and the last at or above hi.
std::vector<double> nice_ticks(double lo, double hi, int target);

// A tick label in human units: 0, 250, 1.5k, 12k, 1.2M, 3G, 0.25; and 5e-4 style on an axis whose
// largest tick is below 0.01 (axis_max is that largest magnitude).
std::string tick_label(double v, double axis_max);

// The chart laid out: background, title, legend, grid, axes, tick labels, axis titles, series.
// Throws std::invalid_argument for a chart smaller than 200x120.
Drawing layout_chart(const Chart& chart);

// The drawing painted by cairo: an SVG document (text as glyph outlines, so it shows the same
// everywhere), and a PNG file (8-bit RGB) of width x height pixels.
std::string render_svg(const Drawing& d);
std::string render_png(const Drawing& d);

// Lays out the chart and writes PATH_STEM.svg and PATH_STEM.png; returns the two paths.
// Throws UserError when a file cannot be written.
std::vector<std::string> write_chart(const Chart& chart, const std::string& path_stem);

} // namespace dptrain
