// UTF-8: one code point read or written at a time, for the tokenizers. Not for: validating whole
// documents for JSON (core/json.h escapes what is not UTF-8).
#pragma once

#include <cstdint>
#include <string>

namespace dptrain {

// Reads the code point at s[*i] and moves *i past it; false (nothing moved) at a byte that does
// not begin a complete, well-formed sequence (RFC 3629: the shortest form, no surrogates, at most
// U+10FFFF). strict false: any lead byte with its continuation bytes, as dptrain read UTF-8 before
// it checked these (for tables it stored then).
bool next_code_point(const std::string& s, size_t* i, uint32_t* cp, bool strict = true);
void append_utf8(std::string& out, uint32_t cp);

} // namespace dptrain
