// UTF-8 code points, one at a time.
#include "dptrain/core/utf8.h"

namespace dptrain {

bool next_code_point(const std::string& s, size_t* i, uint32_t* cp, bool strict) {
    unsigned char c = (unsigned char)s[*i];
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 0 || *i + len > s.size()) return false;
    uint32_t v = len == 1 ? c : c & (0xFF >> (len + 1));
    for (int k = 1; k < len; ++k) {
        unsigned char d = (unsigned char)s[*i + k];
        if ((d >> 6) != 2) return false;
        v = (v << 6) | (d & 0x3F);
    }
    // Well-formed means shortest (an overlong C0 AF is '/' in disguise: the text a tokenizer was
    // given would not be the file's bytes), no UTF-16 surrogate (CESU-8 and WTF-8 write them, which
    // no UTF-8 reader takes back), and no code point past U+10FFFF (RFC 3629).
    static constexpr uint32_t kShortest[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (strict && (v < kShortest[len] || (v >= 0xD800 && v <= 0xDFFF) || v > 0x10FFFF)) return false;
    *cp = v;
    *i += len;
    return true;
}

void append_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) out += (char)cp;
    else if (cp < 0x800) out += (char)(0xC0 | (cp >> 6)), out += (char)(0x80 | (cp & 0x3F));
    else if (cp < 0x10000)
        out += (char)(0xE0 | (cp >> 12)), out += (char)(0x80 | ((cp >> 6) & 0x3F)), out += (char)(0x80 | (cp & 0x3F));
    else
        out += (char)(0xF0 | (cp >> 18)), out += (char)(0x80 | ((cp >> 12) & 0x3F)),
            out += (char)(0x80 | ((cp >> 6) & 0x3F)), out += (char)(0x80 | (cp & 0x3F));
}

} // namespace dptrain
