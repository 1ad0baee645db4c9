// Line charts as SVG and PNG, laid out once into one Drawing that cairo paints to both, so they
// agree. Not for general plotting: one x-y chart per image, linear axes, a fixed palette.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dptrain {

struct Series {
    std::string name;
    std::vector<double> x, y;  // joined in order; non-finite ones skipped
    bool line = true;
    bool markers = false;      // always for a series of one point
};

struct Chart {
    std::string title, x_title, y_title;
    int width = 800, height = 450;  // pixels; at least 200x120
    std::vector<Series> series;
    bool y_from_zero = false;       // for rates and times
    std::string message;            // when set, shown instead of the series
};

struct Rgb {
    uint8_t r = 0, g = 0, b = 0;
    bool operator==(const Rgb& o) const { return r == o.r && g == o.g && b == o.b; }
};

Rgb series_colour(int i);  // repeats after 8

// Pixel coordinates, y down from the top-left.
struct Shape {
    enum class Kind { rect, line, polyline, circle, text };
    enum class Anchor { start, middle, end };
    Kind kind = Kind::line;
    Rgb colour;
    // rect: x, y, w, h (filled); line: x0, y0, x1, y1; polyline: x0, y0, x1, y1, ...;
    // circle: cx, cy, r (filled); text: x, y of the anchor point on the baseline.
    std::vector<double> pts;
    double stroke = 1;
    int series = -1;       // the Chart series drawn, or -1
    std::string text;      // UTF-8
    int scale = 1;         // 10 * scale pixels
    Anchor anchor = Anchor::start;
    bool vertical = false; // reads upwards
};

struct Drawing {
    int width = 0, height = 0;
    std::vector<Shape> shapes;  // painted in this order
};

// What layout budgets: 6*scale pixels a character (DejaVu Sans Mono's 0.6 em at 10*scale).
int text_width(const std::string& s, int scale);

// 1, 2 or 5 x 10^k steps, about `target`, covering [lo, hi].
std::vector<double> nice_ticks(double lo, double hi, int target);

// 0, 250, 1.5k, 1.2M, 0.25; 5e-4 style when axis_max < 0.01.
std::string tick_label(double v, double axis_max);

// Throws std::invalid_argument below 200x120.
Drawing layout_chart(const Chart& chart);

// SVG text as glyph outlines, so it shows the same everywhere; PNG 8-bit RGB.
std::string render_svg(const Drawing& d);
std::string render_png(const Drawing& d);

// PATH_STEM.svg and .png; returns the paths. Throws UserError when one cannot be written.
std::vector<std::string> write_chart(const Chart& chart, const std::string& path_stem);

} // namespace dptrain
