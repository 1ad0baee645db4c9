// Charts, part one: axis ticks and the layout of a Chart into a Drawing of pixel shapes; painting
// them (PNG, SVG) is plot_cairo.cpp. Not for reading run logs (dptrain-report makes the Charts).
#include "dptrain/tools/plot.h"

#include "dptrain/core/error.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <utility>

namespace dptrain {

namespace {

// Pixels. Text is 10 px a scale: 2x keeps ticks readable at 800x450, 3x sets the title apart.
const int kMargin = 12;      // image edge to the nearest text
const int kGap = 8;          // between a text block and what it labels
const int kTickLen = 5;      // tick marks outside the plot area
const int kTitleScale = 3;
const int kTextScale = 2;
const int kSwatch = 22;      // legend line sample
const double kSeriesStroke = 2.5;
const double kMarkerRadius = 3.5;

const Rgb kBackground{255, 255, 255};
const Rgb kInk{34, 34, 34};       // title, labels
const Rgb kAxis{90, 90, 90};      // frame and ticks
const Rgb kGrid{228, 228, 228};   // grid lines
const Rgb kMuted{120, 120, 120};  // the "no data" message

Shape shape(Shape::Kind kind, Rgb c, std::vector<double> pts) {
    Shape s;
    s.kind = kind;
    s.colour = c;
    s.pts = std::move(pts);
    return s;
}

Shape rect(double x, double y, double w, double h, Rgb c) {
    return shape(Shape::Kind::rect, c, {x, y, w, h});
}

Shape line(double x0, double y0, double x1, double y1, Rgb c, double stroke) {
    Shape s = shape(Shape::Kind::line, c, {x0, y0, x1, y1});
    s.stroke = stroke;
    return s;
}

Shape circle(double cx, double cy, double r, Rgb c, int series) {
    Shape s = shape(Shape::Kind::circle, c, {cx, cy, r});
    s.series = series;
    return s;
}

Shape text(double x, double y, const std::string& str, int scale, Shape::Anchor anchor, Rgb c,
           bool vertical = false) {
    Shape s = shape(Shape::Kind::text, c, {x, y});
    s.text = str;
    s.scale = scale;
    s.anchor = anchor;
    s.vertical = vertical;
    return s;
}

// Pixel centres of a 1-pixel line sit on .5 so it covers exactly one row or column.
double crisp(double v) {
    return std::floor(v) + 0.5;
}

// "1.2500" -> "1.25", "3.000" -> "3".
std::string trim_zeros(std::string s) {
    if (s.find('.') == std::string::npos) return s;
    while (!s.empty() && s.back() == '0') s.pop_back();
    if (!s.empty() && s.back() == '.') s.pop_back();
    return s;
}

struct Range {
    double lo = 0, hi = 0;
    bool any = false;
    void add(double v) {
        if (!std::isfinite(v)) return;
        lo = any ? std::min(lo, v) : v;
        hi = any ? std::max(hi, v) : v;
        any = true;
    }
};

// One entry per series, rows right-aligned to `right` from `baseline`; returns the next row's
// baseline.
int add_legend(Drawing& d, const Chart& c, double left, double right, int baseline) {
    const int row_height = 10 * kTextScale + 4;
    const int spacing = 18;  // between entries
    std::vector<std::vector<int>> rows(1);
    double used = 0;
    for (int i = 0; i < (int)c.series.size(); ++i) {
        double w = kSwatch + 6 + text_width(c.series[i].name, kTextScale);
        if (!rows.back().empty() && used + spacing + w > right - left) {
            rows.emplace_back();
            used = 0;
        }
        used += (rows.back().empty() ? 0 : spacing) + w;
        rows.back().push_back(i);
    }
    for (const auto& row : rows) {
        double width = 0;
        for (int i : row) width += kSwatch + 6 + text_width(c.series[i].name, kTextScale) + spacing;
        double x = right - (width - spacing);
        for (int i : row) {
            const Series& s = c.series[i];
            Rgb col = series_colour(i);
            double mid = baseline - 3.5 * kTextScale;  // the middle of a capital
            if (s.line && s.x.size() > 1) d.shapes.push_back(line(x + 2, mid, x + kSwatch - 2, mid, col, kSeriesStroke));
            if (s.markers || s.x.size() == 1) d.shapes.push_back(circle(x + kSwatch / 2.0, mid, kMarkerRadius, col, -1));
            d.shapes.push_back(text(x + kSwatch + 6, baseline, s.name, kTextScale, Shape::Anchor::start, kInk));
            x += kSwatch + 6 + text_width(s.name, kTextScale) + spacing;
        }
        baseline += row_height;
    }
    return baseline;
}

} // namespace

Rgb series_colour(int i) {
    // Okabe-Ito (distinct for common colour-vision deficiencies), less its too-light yellow, plus a
    // dark grey.
    static const Rgb palette[8] = {{0, 114, 178},  {213, 94, 0},  {0, 158, 115},   {204, 121, 167},
                                   {86, 180, 233}, {230, 159, 0}, {120, 120, 120}, {20, 20, 20}};
    return palette[((i % 8) + 8) % 8];
}

int text_width(const std::string& s, int scale) {
    int chars = 0;  // characters, not bytes: a UTF-8 continuation byte starts none
    for (unsigned char c : s) chars += (c & 0xC0) != 0x80;
    return chars == 0 ? 0 : (6 * chars - 1) * scale;
}

std::vector<double> nice_ticks(double lo, double hi, int target) {
    if (!std::isfinite(lo) || !std::isfinite(hi)) return {0, 1};
    if (hi < lo) std::swap(lo, hi);
    if (hi == lo) {
        // One value: centre it in a small range around it.
        double pad = lo == 0 ? 1 : std::fabs(lo) * 0.1;
        lo -= pad;
        hi += pad;
    }
    double rough = (hi - lo) / std::max(1, target - 1);
    double mag = std::pow(10.0, std::floor(std::log10(rough)));
    double norm = rough / mag;
    double step = (norm < 1.5 ? 1 : norm < 3 ? 2 : norm < 7 ? 5 : 10) * mag;
    // The slack keeps a bound that sits on a tick (up to rounding) from gaining an extra step.
    double first = std::floor(lo / step + 1e-9);
    double last = std::ceil(hi / step - 1e-9);
    std::vector<double> ticks;
    for (double k = first; k <= last + 0.5; k += 1) {
        double t = k * step;
        ticks.push_back(std::fabs(t) < step * 1e-9 ? 0.0 : t);
    }
    return ticks;
}

std::string tick_label(double v, double axis_max) {
    if (v == 0 || std::fabs(v) < std::fabs(axis_max) * 1e-12) return "0";
    if (std::fabs(axis_max) < 0.01) {
        // Learning rates and the like: 5e-4 reads better than 0.0005.
        int e = (int)std::floor(std::log10(std::fabs(v)));
        double m = v / std::pow(10.0, e);
        if (std::fabs(m) >= 10 - 1e-9) {
            m /= 10;
            ++e;
        }
        return trim_zeros(strfmt("%.3f", m)) + strfmt("e%d", e);
    }
    double a = std::fabs(v);
    if (a >= 1e9) return trim_zeros(strfmt("%.3f", v / 1e9)) + "G";
    if (a >= 1e6) return trim_zeros(strfmt("%.3f", v / 1e6)) + "M";
    if (a >= 1e3) return trim_zeros(strfmt("%.3f", v / 1e3)) + "k";
    return trim_zeros(strfmt("%.6f", v));
}

namespace {

// From the finite points of every series.
struct Axes {
    bool empty = true;  // nothing to plot (or a message instead)
    std::vector<double> xt, yt;
    std::vector<std::string> xl, yl;
    int ylabel_w = 0;  // the widest y tick label
};

Axes axes_of(const Chart& c) {
    Range xr, yr;
    for (const Series& ser : c.series)
        for (size_t i = 0; i < ser.x.size() && i < ser.y.size(); ++i)
            if (std::isfinite(ser.x[i]) && std::isfinite(ser.y[i])) {
                xr.add(ser.x[i]);
                yr.add(ser.y[i]);
            }
    Axes a;
    a.empty = !c.message.empty() || !xr.any;
    if (a.empty) return a;
    if (c.y_from_zero) {
        yr.lo = std::min(yr.lo, 0.0);
        yr.hi = std::max(yr.hi, 0.0);
    }
    a.yt = nice_ticks(yr.lo, yr.hi, 6);
    a.xt = nice_ticks(xr.lo, xr.hi, std::max(3, c.width / 110));
    const double ymax = std::max(std::fabs(a.yt.front()), std::fabs(a.yt.back()));
    const double xmax = std::max(std::fabs(a.xt.front()), std::fabs(a.xt.back()));
    for (double t : a.yt) {
        a.yl.push_back(tick_label(t, ymax));
        a.ylabel_w = std::max(a.ylabel_w, text_width(a.yl.back(), kTextScale));
    }
    for (double t : a.xt) a.xl.push_back(tick_label(t, xmax));
    return a;
}

struct Area {
    double left, right, top, bottom;
};

// The frame and the message (or "no data") in its middle.
void draw_empty(Drawing& d, const Chart& c, const Area& p) {
    const int s = kTextScale;
    for (double x : {p.left, p.right}) d.shapes.push_back(line(crisp(x), p.top, crisp(x), p.bottom, kAxis, 1));
    for (double y : {p.top, p.bottom}) d.shapes.push_back(line(p.left, crisp(y), p.right, crisp(y), kAxis, 1));
    const std::string msg = c.message.empty() ? std::string("no data") : c.message;
    d.shapes.push_back(
        text((p.left + p.right) / 2, (p.top + p.bottom) / 2 + 3.5 * s, msg, s, Shape::Anchor::middle, kMuted));
}

// Grid and tick labels, then the axes, then each series over them.
template <typename PX, typename PY>
void draw_plot(Drawing& d, const Chart& c, const Axes& a, const Area& p, PX px, PY py) {
    const int s = kTextScale;
    for (size_t i = 0; i < a.yt.size(); ++i) {
        const double y = crisp(py(a.yt[i]));
        if (i > 0) d.shapes.push_back(line(p.left, y, p.right, y, kGrid, 1));
        d.shapes.push_back(line(p.left - kTickLen, y, p.left, y, kAxis, 1));
        d.shapes.push_back(text(p.left - kTickLen - 4, std::round(y + 3.5 * s), a.yl[i], s, Shape::Anchor::end, kInk));
    }
    for (size_t i = 0; i < a.xt.size(); ++i) {
        const double x = crisp(px(a.xt[i]));
        if (i > 0) d.shapes.push_back(line(x, p.top, x, p.bottom, kGrid, 1));
        d.shapes.push_back(line(x, p.bottom, x, p.bottom + kTickLen, kAxis, 1));
        d.shapes.push_back(text(x, p.bottom + kTickLen + 4 + 7 * s, a.xl[i], s, Shape::Anchor::middle, kInk));
    }
    d.shapes.push_back(line(crisp(p.left), p.top, crisp(p.left), p.bottom + 0.5, kAxis, 1));
    d.shapes.push_back(line(p.left, crisp(p.bottom), p.right, crisp(p.bottom), kAxis, 1));
    for (int i = 0; i < (int)c.series.size(); ++i) {
        const Series& ser = c.series[i];
        Shape poly;
        poly.kind = Shape::Kind::polyline;
        poly.colour = series_colour(i);
        poly.stroke = kSeriesStroke;
        poly.series = i;
        for (size_t k = 0; k < ser.x.size() && k < ser.y.size(); ++k) {
            if (!std::isfinite(ser.x[k]) || !std::isfinite(ser.y[k])) continue;
            poly.pts.push_back(px(ser.x[k]));
            poly.pts.push_back(py(ser.y[k]));
        }
        if (poly.pts.empty()) continue;
        if (ser.line && poly.pts.size() > 2) d.shapes.push_back(poly);
        if (ser.markers || poly.pts.size() == 2)
            for (size_t k = 0; k + 1 < poly.pts.size(); k += 2)
                d.shapes.push_back(circle(poly.pts[k], poly.pts[k + 1], kMarkerRadius, poly.colour, i));
    }
}

} // namespace

Drawing layout_chart(const Chart& c) {
    // Below this the margins and labels leave no plot area.
    if (c.width < 200 || c.height < 120)
        throw std::invalid_argument(strfmt("chart \"%s\": %dx%d is too small (at least 200x120)", c.title.c_str(),
                                           c.width, c.height));
    Drawing d;
    d.width = c.width;
    d.height = c.height;
    const double W = c.width, H = c.height;
    const int s = kTextScale;
    d.shapes.push_back(rect(0, 0, W, H, kBackground));

    // Title, then the legend below it: neither can cover the data that way.
    const int baseline = kMargin + 7 * kTitleScale;
    d.shapes.push_back(text(W / 2, baseline, c.title, kTitleScale, Shape::Anchor::middle, kInk));
    double top = baseline + kTitleScale + kGap + 4;
    const Axes a = axes_of(c);

    // What is left after the title, legend, axis titles and tick labels.
    double left = kMargin + (c.y_title.empty() ? 0 : 8 * s + kGap) + a.ylabel_w + kTickLen + 4;
    double right = W - kMargin - (a.xl.empty() ? 0 : text_width(a.xl.back(), s) / 2.0);
    if (c.series.size() > 1 && !a.empty) top = add_legend(d, c, left, right, (int)top + 7 * s) - 7 * s + 4;
    double bottom = H - kMargin - (c.x_title.empty() ? 0 : 8 * s + kGap) - (a.empty ? 0 : 8 * s + kTickLen + 4);
    const Area p{std::floor(left), std::floor(right), std::floor(top), std::floor(bottom)};

    if (!c.y_title.empty())
        d.shapes.push_back(text(kMargin + 7 * s, (p.top + p.bottom) / 2, c.y_title, s, Shape::Anchor::middle, kInk, true));
    if (!c.x_title.empty())
        d.shapes.push_back(text((p.left + p.right) / 2, H - kMargin - s, c.x_title, s, Shape::Anchor::middle, kInk));
    if (a.empty) {
        draw_empty(d, c, p);
        return d;
    }
    auto px = [&](double x) { return p.left + (x - a.xt.front()) / (a.xt.back() - a.xt.front()) * (p.right - p.left); };
    auto py = [&](double y) { return p.bottom - (y - a.yt.front()) / (a.yt.back() - a.yt.front()) * (p.bottom - p.top); };
    draw_plot(d, c, a, p, px, py);
    return d;
}

} // namespace dptrain
