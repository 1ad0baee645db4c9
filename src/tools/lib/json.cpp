// JSON reading: a recursive-descent parser over a string, and the JSON-lines reader built on it.
// Strict on purpose: a log line cut short by a crash, or edited by hand, should be reported with
// its line number rather than read as something else. Not for writing JSON.
#include "dptrain/tools/json.h"

#include "dptrain/core/error.h"

#include <cstdlib>
#include <fstream>

namespace dptrain {

const JsonValue* JsonValue::find(const std::string& key) const {
    for (const auto& m : members)
        if (m.first == key) return &m.second;
    return nullptr;
}

double JsonValue::number_or(const std::string& key, double fallback) const {
    const JsonValue* v = find(key);
    return v && v->kind == Kind::number ? v->number : fallback;
}

std::string JsonValue::string_or_empty(const std::string& key) const {
    const JsonValue* v = find(key);
    return v && v->kind == Kind::string ? v->string : std::string();
}

namespace {

// Nesting deeper than this is refused: the parser recurses once per level, and no log we read
// nests more than three levels, so a hostile line cannot exhaust the stack.
const int kMaxDepth = 64;

class Parser {
  public:
    explicit Parser(const std::string& text) : s_(text) {}

    JsonValue parse_document() {
        skip_space();
        JsonValue v = parse_value(0);
        skip_space();
        if (pos_ != s_.size()) fail("unexpected " + found() + " after the value");
        return v;
    }

  private:
    const std::string& s_;
    size_t pos_ = 0;

    [[noreturn]] void fail(const std::string& what) const {
        int line = 1, col = 1;
        for (size_t i = 0; i < pos_ && i < s_.size(); ++i) {
            if (s_[i] == '\n') {
                ++line;
                col = 1;
            } else {
                ++col;
            }
        }
        bool multi_line = s_.find('\n') != std::string::npos;
        if (multi_line) throw JsonError(strfmt("line %d column %d: %s", line, col, what.c_str()));
        throw JsonError(strfmt("column %d: %s", col, what.c_str()));
    }

    // What sits at the cursor, for error messages.
    std::string found() const {
        if (pos_ >= s_.size()) return "end of input";
        unsigned char c = s_[pos_];
        if (c < 0x20 || c >= 0x7f) return strfmt("byte 0x%02x", c);
        return strfmt("'%c'", c);
    }

    void skip_space() {
        while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r'))
            ++pos_;
    }

    void expect(char c, const char* context) {
        if (pos_ >= s_.size() || s_[pos_] != c) fail(strfmt("expected '%c' %s, found ", c, context) + found());
        ++pos_;
    }

    JsonValue parse_value(int depth) {
        if (depth > kMaxDepth) fail(strfmt("nested deeper than %d levels", kMaxDepth));
        if (pos_ >= s_.size()) fail("expected a value, found end of input");
        char c = s_[pos_];
        if (c == '{') return parse_object(depth);
        if (c == '[') return parse_array(depth);
        JsonValue v;
        if (c == '"') {
            v.kind = JsonValue::Kind::string;
            v.string = parse_string();
        } else if (c == '-' || (c >= '0' && c <= '9')) {
            v.kind = JsonValue::Kind::number;
            v.number = parse_number();
        } else if (literal("true")) {
            v.kind = JsonValue::Kind::boolean;
            v.boolean = true;
        } else if (literal("false")) {
            v.kind = JsonValue::Kind::boolean;
        } else if (!literal("null")) {
            fail("expected a value, found " + found());
        }
        return v;
    }

    bool literal(const char* word) {
        size_t n = std::char_traits<char>::length(word);
        if (s_.compare(pos_, n, word) != 0) return false;
        pos_ += n;
        return true;
    }

    JsonValue parse_object(int depth) {
        JsonValue v;
        v.kind = JsonValue::Kind::object;
        ++pos_;  // '{'
        skip_space();
        if (pos_ < s_.size() && s_[pos_] == '}') {
            ++pos_;
            return v;
        }
        for (;;) {
            skip_space();
            if (pos_ >= s_.size() || s_[pos_] != '"') fail("expected a quoted member name, found " + found());
            std::string key = parse_string();
            skip_space();
            expect(':', "after a member name");
            skip_space();
            JsonValue member = parse_value(depth + 1);
            v.members.emplace_back(std::move(key), std::move(member));
            skip_space();
            if (pos_ < s_.size() && s_[pos_] == ',') {
                ++pos_;
                continue;
            }
            if (pos_ < s_.size() && s_[pos_] == '}') {
                ++pos_;
                return v;
            }
            fail("expected ',' or '}' in an object, found " + found());
        }
    }

    JsonValue parse_array(int depth) {
        JsonValue v;
        v.kind = JsonValue::Kind::array;
        ++pos_;  // '['
        skip_space();
        if (pos_ < s_.size() && s_[pos_] == ']') {
            ++pos_;
            return v;
        }
        for (;;) {
            skip_space();
            v.items.push_back(parse_value(depth + 1));
            skip_space();
            if (pos_ < s_.size() && s_[pos_] == ',') {
                ++pos_;
                continue;
            }
            if (pos_ < s_.size() && s_[pos_] == ']') {
                ++pos_;
                return v;
            }
            fail("expected ',' or ']' in an array, found " + found());
        }
    }

    // -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? checked by hand, because strtod alone would also
    // take "nan", "inf", hex floats and a leading '+', none of which are JSON.
    double parse_number() {
        size_t start = pos_;
        auto digits = [&]() {
            size_t d = pos_;
            while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
            return pos_ - d;
        };
        if (s_[pos_] == '-') ++pos_;
        if (pos_ < s_.size() && s_[pos_] == '0') {
            ++pos_;
        } else if (digits() == 0) {
            fail("expected a digit in a number, found " + found());
        }
        if (pos_ < s_.size() && s_[pos_] == '.') {
            ++pos_;
            if (digits() == 0) fail("expected a digit after the decimal point, found " + found());
        }
        if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
            ++pos_;
            if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) ++pos_;
            if (digits() == 0) fail("expected a digit in the exponent, found " + found());
        }
        // The text is valid now; strtod converts it (and gives +-HUGE_VAL past the double range).
        return std::strtod(s_.substr(start, pos_ - start).c_str(), nullptr);
    }

    unsigned hex4() {
        unsigned u = 0;
        for (int i = 0; i < 4; ++i, ++pos_) {
            if (pos_ >= s_.size()) fail("expected 4 hex digits after \\u, found end of input");
            char c = s_[pos_];
            u <<= 4;
            if (c >= '0' && c <= '9') u |= c - '0';
            else if (c >= 'a' && c <= 'f') u |= c - 'a' + 10;
            else if (c >= 'A' && c <= 'F') u |= c - 'A' + 10;
            else fail("expected 4 hex digits after \\u, found " + found());
        }
        return u;
    }

    static void append_utf8(std::string& out, unsigned cp) {
        if (cp < 0x80) {
            out += char(cp);
        } else if (cp < 0x800) {
            out += char(0xC0 | (cp >> 6));
            out += char(0x80 | (cp & 0x3F));
        } else if (cp < 0x10000) {
            out += char(0xE0 | (cp >> 12));
            out += char(0x80 | ((cp >> 6) & 0x3F));
            out += char(0x80 | (cp & 0x3F));
        } else {
            out += char(0xF0 | (cp >> 18));
            out += char(0x80 | ((cp >> 12) & 0x3F));
            out += char(0x80 | ((cp >> 6) & 0x3F));
            out += char(0x80 | (cp & 0x3F));
        }
    }

    // A quoted string with its escapes resolved to UTF-8. Bytes >= 0x80 pass through unchecked.
    std::string parse_string() {
        std::string out;
        ++pos_;  // '"'
        for (;;) {
            if (pos_ >= s_.size()) fail("unterminated string (end of input before the closing quote)");
            unsigned char c = s_[pos_];
            if (c == '"') {
                ++pos_;
                return out;
            }
            if (c < 0x20) fail(strfmt("control byte 0x%02x inside a string (write it as an escape)", c));
            if (c != '\\') {
                out += char(c);
                ++pos_;
                continue;
            }
            ++pos_;
            if (pos_ >= s_.size()) fail("unterminated string (end of input after a backslash)");
            char e = s_[pos_++];
            switch (e) {
            case '"': out += '"'; break;
            case '\\': out += '\\'; break;
            case '/': out += '/'; break;
            case 'b': out += '\b'; break;
            case 'f': out += '\f'; break;
            case 'n': out += '\n'; break;
            case 'r': out += '\r'; break;
            case 't': out += '\t'; break;
            case 'u': {
                unsigned cp = hex4();
                if (cp >= 0xDC00 && cp <= 0xDFFF) fail("a low surrogate \\u escape without a high one before it");
                if (cp >= 0xD800 && cp <= 0xDBFF) {
                    if (!literal("\\u")) fail("a high surrogate \\u escape without a low one after it");
                    unsigned lo = hex4();
                    if (lo < 0xDC00 || lo > 0xDFFF) fail("a high surrogate \\u escape without a low one after it");
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                }
                append_utf8(out, cp);
                break;
            }
            default:
                --pos_;
                fail("unknown escape \\" + found());
            }
        }
    }
};

} // namespace

JsonValue parse_json(const std::string& text) {
    return Parser(text).parse_document();
}

std::vector<JsonRecord> read_jsonl_records(const std::string& path) {
    std::ifstream in(path);
    if (!in) throw UserError(strfmt("%s: cannot open it", path.c_str()));
    std::vector<JsonRecord> out;
    std::string line;
    for (int n = 1; std::getline(in, line); ++n) {
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line.find_first_not_of(" \t") == std::string::npos) continue;
        JsonRecord r;
        r.line = n;
        try {
            r.value = parse_json(line);
        } catch (const JsonError& e) {
            throw UserError(strfmt("%s:%d: %s", path.c_str(), n, e.what()));
        }
        if (!r.value.is_object())
            throw UserError(strfmt("%s:%d: expected one JSON object per line, found another kind of value",
                                   path.c_str(), n));
        out.push_back(std::move(r));
    }
    if (in.bad()) throw UserError(strfmt("%s: read failed", path.c_str()));
    return out;
}

} // namespace dptrain
