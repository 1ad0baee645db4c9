// Charts and their inputs: the strict JSON parser and JSON-lines reader (line numbers in errors),
// axis ticks, the layout's shapes per series, the PNG container checked byte by byte with zlib,
// the pixels under a drawn series (decoded again by cairo), text in other scripts, and the SVG.
// Not the dptrain-report command line: tests/integration/report_plot.sh runs that.
#include "helpers.h"

#include "dptrain/core/error.h"
#include "dptrain/tools/json.h"
#include "dptrain/tools/plot.h"

#include <catch2/catch.hpp>

#include <cairo.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>
#include <zlib.h>

using namespace dptrain;

namespace {

std::string json_error(const std::string& text) {
    try {
        parse_json(text);
    } catch (const JsonError& e) {
        return e.what();
    }
    return "";
}

std::string user_error_of_jsonl(const std::string& path) {
    try {
        read_jsonl_records(path);
    } catch (const UserError& e) {
        return e.what();
    }
    return "";
}

std::string write_tmp(const std::string& name, const std::string& text) {
    static std::string dir = testing::temp_dir("plot");
    std::string path = dir + "/" + name;
    std::ofstream(path) << text;
    return path;
}

uint32_t be32(const std::string& b, size_t at) {
    const auto u = [&](size_t i) { return uint32_t((unsigned char)b[at + i]); };
    return u(0) << 24 | u(1) << 16 | u(2) << 8 | u(3);
}

// A PNG decoded by cairo (an independent reader of what the writer wrote): pixel (x, y) as RGB.
class Decoded {
  public:
    explicit Decoded(const std::string& png) : png_(png) {
        s_ = cairo_image_surface_create_from_png_stream(read, this);
        REQUIRE(cairo_surface_status(s_) == CAIRO_STATUS_SUCCESS);
        cairo_surface_flush(s_);
    }
    ~Decoded() { cairo_surface_destroy(s_); }
    int width() const { return cairo_image_surface_get_width(s_); }
    int height() const { return cairo_image_surface_get_height(s_); }
    Rgb at(int x, int y) const {
        const unsigned char* row = cairo_image_surface_get_data(s_) + (size_t)y * cairo_image_surface_get_stride(s_);
        uint32_t px;
        std::memcpy(&px, row + 4 * x, 4);  // 0xAARRGGBB in native order
        return Rgb{(uint8_t)(px >> 16), (uint8_t)(px >> 8), (uint8_t)px};
    }
    // Pixels in the rectangle that are not the white background.
    long inked(int x0, int y0, int x1, int y1) const {
        long n = 0;
        for (int y = y0; y < y1; ++y)
            for (int x = x0; x < x1; ++x) n += !(at(x, y) == Rgb{255, 255, 255});
        return n;
    }

  private:
    static cairo_status_t read(void* self, unsigned char* data, unsigned int n) {
        Decoded* d = static_cast<Decoded*>(self);
        if (d->at_ + n > d->png_.size()) return CAIRO_STATUS_READ_ERROR;
        std::memcpy(data, d->png_.data() + d->at_, n);
        d->at_ += n;
        return CAIRO_STATUS_SUCCESS;
    }
    std::string png_;
    size_t at_ = 0;
    cairo_surface_t* s_;
};

bool near(Rgb a, Rgb b, int tol) {
    return std::abs(a.r - b.r) <= tol && std::abs(a.g - b.g) <= tol && std::abs(a.b - b.b) <= tol;
}

Chart one_line_chart() {
    Chart c;
    c.title = "loss";
    c.x_title = "step";
    c.y_title = "loss";
    c.width = 640;
    c.height = 360;
    Series s;
    s.name = "train";
    for (int i = 0; i <= 20; ++i) {
        s.x.push_back(100.0 * i);
        s.y.push_back(2.0 / (1 + 0.3 * i));
    }
    c.series.push_back(s);
    return c;
}

// The point counts of the layout's series lines, in drawing order.
std::vector<int> polyline_point_counts(const Drawing& d) {
    std::vector<int> counts;
    for (const Shape& s : d.shapes)
        if (s.kind == Shape::Kind::polyline) counts.push_back((int)s.pts.size() / 2);
    return counts;
}

// Whether the layout has a text shape saying exactly `t`.
bool has_text(const Drawing& d, const std::string& t) {
    for (const Shape& s : d.shapes)
        if (s.kind == Shape::Kind::text && s.text == t) return true;
    return false;
}

} // namespace

TEST_CASE("the JSON parser reads every kind of value", "[plot]") {
    Json v = parse_json(" {\"type\":\"step\", \"step\":250, \"loss\":-0.5e-3, \"ok\":true, \"no\":false, "
                        "\"none\":null, \"big\":1E+2, \"list\":[1, [], {}], \"s\":\"a\\\"b\\\\c\\n\\u00e9\\ud83d\\ude00\","
                        "\"phases\":{\"data\":{\"mean_ms\":0.01},\"forward\":{\"mean_ms\":2}}} ");
    REQUIRE(v.is_object());
    CHECK(json_string_or_empty(v, "type") == "step");
    CHECK(json_number_or(v, "step", -1) == 250);
    CHECK(json_number_or(v, "loss", 0) == Approx(-0.5e-3));
    CHECK(json_number_or(v, "big", 0) == 100);
    CHECK(json_member(v, "ok")->get<bool>());
    CHECK(json_member(v, "no")->is_boolean());
    CHECK_FALSE(json_member(v, "no")->get<bool>());
    CHECK(json_member(v, "none")->is_null());
    CHECK(json_member(v, "list")->size() == 3);
    CHECK(json_string_or_empty(v, "s") == "a\"b\\c\n\xc3\xa9\xf0\x9f\x98\x80");
    CHECK(json_member(v, "absent") == nullptr);
    CHECK(json_number_or(v, "type", 7) == 7);  // present but not a number
    // Members keep the file's order: the phases chart lists phases as the log writes them.
    const Json* ph = json_member(v, "phases");
    REQUIRE(ph->size() == 2);
    CHECK(ph->begin().key() == "data");
    CHECK(std::next(ph->begin()).key() == "forward");
    CHECK(json_number_or(std::next(ph->begin()).value(), "mean_ms", 0) == 2);
    CHECK(parse_json("0").get<double>() == 0);
    CHECK(parse_json("\"\"").get<std::string>().empty());
}

TEST_CASE("the JSON parser rejects malformed text and says where", "[plot]") {
    const char* bad[] = {"",          "{",         "{\"a\":1,}", "[1,]",     "01",          "1.",        ".5",
                         "+1",        "-",         "1e",         "nan",      "Infinity",    "tru",       "nul",
                         "\"abc",     "{\"a\" 1}", "{a:1}",      "[1 2]",    "\"\\x\"",     "1 2",       "{} x",
                         "\"\\ud800\"", "\"\\udc00\"", "\"\\u12\"", "'a'",     "{\"a\":}",    "[,1]",      "{\"a\":1 \"b\":2}",
                         "// c\n1",   "[1] /* c */", "\"\xff\""};
    for (const char* text : bad) {
        INFO("input: " << text);
        CHECK_THROWS_AS(parse_json(text), JsonError);
    }
    // Where (the column of the text's only line, or line and column) and what was found.
    std::string e = json_error("{\"a\":1,}");
    CHECK(e.rfind("column 8: ", 0) == 0);
    CHECK(e.find("'}'") != std::string::npos);
    e = json_error("{\"loss\":0.5");
    CHECK(e.rfind("column 12: ", 0) == 0);
    CHECK(e.find("end of input") != std::string::npos);
    CHECK(json_error("\"a\tb\"").find("control character U+0009") != std::string::npos);
    CHECK(json_error("[\n1,\n2 3]").rfind("line 3 column 3: ", 0) == 0);
    // A number beyond a double is refused (found by fuzz_jsonl), not thrown past the reader.
    CHECK(json_error("[1e3750]").find("number overflow") != std::string::npos);
    // Deep nesting is refused as it is read.
    CHECK(json_error(std::string(100000, '[')).find("nested deeper than") != std::string::npos);
    // Every message is one line, even when the text quoted holds control bytes.
    CHECK(json_error("[\"\x01\x02\"]").find_first_of("\n\r") == std::string::npos);
}

TEST_CASE("read_jsonl_records skips blank lines and names the file and line of a bad one", "[plot]") {
    std::string good = write_tmp("good.jsonl", "{\"type\":\"step\",\"step\":1}\n\n   \n{\"type\":\"eval\"}\r\n");
    std::vector<JsonRecord> recs = read_jsonl_records(good);
    REQUIRE(recs.size() == 2);
    CHECK(recs[0].line == 1);
    CHECK(recs[1].line == 4);
    CHECK(json_string_or_empty(recs[1].value, "type") == "eval");

    // A line cut short in the middle of the file, as a crash during a write would leave it.
    std::string cut = write_tmp("cut.jsonl", "{\"type\":\"step\",\"step\":1,\"loss\":2}\n\n{\"type\":\"step\",\"st\n"
                                             "{\"type\":\"step\",\"step\":3,\"loss\":1}\n");
    CHECK(user_error_of_jsonl(cut).rfind(cut + ":3: column 19: ", 0) == 0);
    CHECK(user_error_of_jsonl(cut).find("missing closing quote") != std::string::npos);
    std::string arr = write_tmp("array.jsonl", "{}\n[1]\n");
    CHECK(user_error_of_jsonl(arr) == arr + ":2: expected one JSON object per line, found another kind of value");
    CHECK(user_error_of_jsonl(good + ".missing") == good + ".missing: cannot open it");
    // The last line cut short, without its newline (a killed run's metrics): left out, not an error;
    // with its newline it is a damaged line like any other.
    std::string tail = write_tmp("tail.jsonl", "{\"type\":\"step\",\"step\":1,\"loss\":2}\n{\"type\":\"step\",\"st");
    std::vector<JsonRecord> kept = read_jsonl_records(tail);
    CHECK(kept.size() == 1);
    std::string tail_nl = write_tmp("tail-nl.jsonl", "{\"type\":\"step\",\"step\":1,\"loss\":2}\n{\"type\":\"step\",\"st\n");
    CHECK(user_error_of_jsonl(tail_nl).rfind(tail_nl + ":2: ", 0) == 0);
}

TEST_CASE("axis ticks are round and labelled in human units", "[plot]") {
    std::vector<double> t = nice_ticks(0.31, 2.44, 6);
    REQUIRE(t.size() == 6);
    CHECK(t.front() == 0);
    CHECK(t.back() == Approx(2.5));
    CHECK(t[1] == Approx(0.5));
    t = nice_ticks(50, 3000, 7);
    CHECK(t.front() == 0);
    CHECK(t.back() == 3000);
    CHECK(t[1] == 500);
    // One value: a small range around it rather than a division by zero.
    t = nice_ticks(0.5, 0.5, 6);
    CHECK(t.front() < 0.5);
    CHECK(t.back() > 0.5);

    CHECK(tick_label(0, 3000) == "0");
    CHECK(tick_label(500, 3000) == "500");
    CHECK(tick_label(1500, 3000) == "1.5k");
    CHECK(tick_label(12000, 20000) == "12k");
    CHECK(tick_label(1.2e6, 2e6) == "1.2M");
    CHECK(tick_label(3e9, 3e9) == "3G");
    CHECK(tick_label(0.25, 2.5) == "0.25");
    CHECK(tick_label(0.1 + 0.2, 1) == "0.3");
    CHECK(tick_label(5e-4, 2e-3) == "5e-4");
    CHECK(tick_label(1.5e-3, 2e-3) == "1.5e-3");
    CHECK(tick_label(-2000, 4000) == "-2k");
}

TEST_CASE("the PNG is a valid file of the requested size showing the series", "[plot]") {
    Chart c = one_line_chart();
    Drawing d = layout_chart(c);
    const std::string png = render_png(d);

    const char signature[8] = {'\x89', 'P', 'N', 'G', '\r', '\n', '\x1A', '\n'};
    REQUIRE(png.size() > 8 + 25);
    CHECK(png.compare(0, 8, std::string(signature, 8)) == 0);

    // Walk the chunks: each CRC must match, IHDR first with the size asked for, IEND last, and the
    // image data must inflate.
    std::vector<std::string> types;
    std::string idat;
    size_t at = 8;
    while (at + 12 <= png.size()) {
        uint32_t len = be32(png, at);
        REQUIRE(at + 12 + len <= png.size());
        std::string type = png.substr(at + 4, 4);
        types.push_back(type);
        uLong crc = crc32(crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(png.data()) + at + 4, 4 + len);
        INFO("chunk " << type);
        CHECK(be32(png, at + 8 + len) == crc);
        if (type == "IHDR") {
            REQUIRE(len == 13);
            CHECK(be32(png, at + 8) == 640);
            CHECK(be32(png, at + 12) == 360);
            CHECK((unsigned char)png[at + 16] == 8);  // bit depth
            CHECK((unsigned char)png[at + 17] == 2);  // RGB
        }
        if (type == "IDAT") idat += png.substr(at + 8, len);
        at += 12 + len;
    }
    CHECK(at == png.size());
    REQUIRE(types.size() >= 3);
    CHECK(types.front() == "IHDR");
    CHECK(types.back() == "IEND");
    // One filter byte and 3 bytes per pixel on each row.
    std::vector<uint8_t> raw(size_t(360) * (1 + 3 * 640) + 16);
    uLongf raw_len = raw.size();
    REQUIRE(uncompress(raw.data(), &raw_len, reinterpret_cast<const Bytef*>(idat.data()), idat.size()) == Z_OK);
    CHECK(raw_len == size_t(360) * (1 + 3 * 640));

    // Decoded again: a white background, a drawn chart, and every vertex of the series on pixels of
    // the series colour (the line is 2.5 px wide, so one of the 3x3 pixels around the vertex is
    // fully covered; the tolerance allows the edges' antialiasing).
    Decoded img(png);
    REQUIRE(img.width() == 640);
    REQUIRE(img.height() == 360);
    CHECK(img.at(0, 0) == (Rgb{255, 255, 255}));
    CHECK(img.inked(0, 0, 640, 360) > 2000);
    const Shape* line = nullptr;
    for (const Shape& s : d.shapes)
        if (s.kind == Shape::Kind::polyline && s.series == 0) line = &s;
    REQUIRE(line != nullptr);
    REQUIRE(line->pts.size() == 2 * 21);
    const Rgb colour = series_colour(0);
    int on_line = 0;
    for (size_t k = 0; k + 1 < line->pts.size(); k += 2) {
        int cx = (int)line->pts[k], cy = (int)line->pts[k + 1];
        bool found = false;
        for (int dy = -1; dy <= 1; ++dy)
            for (int dx = -1; dx <= 1; ++dx) found = found || near(img.at(cx + dx, cy + dy), colour, 8);
        on_line += found;
    }
    CHECK(on_line == 21);
}

TEST_CASE("the layout draws one line per line series with all its points, and names them", "[plot]") {
    Chart c;
    c.title = "a < b & c";
    c.x_title = "step";
    c.y_title = "ms";
    for (int n : {5, 7}) {
        Series s;
        s.name = "series " + std::to_string(n);
        for (int i = 0; i < n; ++i) s.x.push_back(i), s.y.push_back(n * i);
        c.series.push_back(s);
    }
    Series dots;  // markers only: circles, no line
    dots.name = "dots";
    dots.line = false;
    dots.markers = true;
    dots.x = {1, 2, 3};
    dots.y = {4, 5, 6};
    c.series.push_back(dots);
    Series gap;  // a non-finite value is left out, not drawn at 0
    gap.name = "gap";
    gap.x = {0, 1, 2, 3};
    gap.y = {1, std::nan(""), 2, 3};
    c.series.push_back(gap);

    const Drawing d = layout_chart(c);
    CHECK(polyline_point_counts(d) == std::vector<int>{5, 7, 3});
    int circles = 0;
    for (const Shape& s : d.shapes) circles += s.kind == Shape::Kind::circle && s.series == 2;
    CHECK(circles == 3);
    CHECK(has_text(d, "a < b & c"));
    // A legend names every series when there is more than one.
    for (const char* name : {"series 5", "series 7", "dots", "gap"}) CHECK(has_text(d, name));
    // With one series the legend is left out.
    const Drawing single = layout_chart(one_line_chart());
    CHECK(polyline_point_counts(single) == std::vector<int>{21});
    CHECK_FALSE(has_text(single, "train"));

    // The SVG: a whole document of the drawing's size, each series' stroke in its colour.
    const std::string svg = render_svg(d);
    CHECK(svg.rfind("<?xml", 0) == 0);
    CHECK(svg.size() > 7);
    CHECK(svg.substr(svg.size() - 7) == "</svg>\n");
    CHECK(svg.find("viewBox=\"0 0 800 450\"") != std::string::npos);
    CHECK(svg.find("stroke-width:2.5;") != std::string::npos);
    CHECK(svg.find("stroke:rgb(0%,44.705882%,69.803922%)") != std::string::npos);  // series_colour(0)
}

TEST_CASE("text in other scripts is drawn, in the PNG and the SVG", "[plot]") {
    // Greek, Cyrillic and accented Latin (DejaVu has them): the title must leave ink where it
    // stands; the old bitmap font drew each as '?'.
    Chart c = one_line_chart();
    c.title = "Ωμέγα Привет déjà";
    Chart blank = one_line_chart();
    blank.title = "";
    Decoded with(render_png(layout_chart(c))), without(render_png(layout_chart(blank)));
    const long ink = with.inked(0, 0, 640, 30), none = without.inked(0, 0, 640, 30);
    CHECK(none == 0);
    CHECK(ink > 150);
    // The SVG carries the glyphs' outlines, so any viewer shows them without the font.
    const std::string svg = render_svg(layout_chart(c));
    CHECK(svg.find("<symbol") != std::string::npos);
}

TEST_CASE("a chart with a message draws it instead of the series", "[plot]") {
    Chart c = one_line_chart();
    c.series.clear();
    c.message = "no phase data";
    Drawing d = layout_chart(c);
    CHECK(has_text(d, "no phase data"));
    CHECK(polyline_point_counts(d).empty());
    CHECK(render_png(d).size() > 8);
    CHECK(render_svg(d).find("</svg>") != std::string::npos);
    c.width = 100;
    CHECK_THROWS_AS(layout_chart(c), std::invalid_argument);
}
