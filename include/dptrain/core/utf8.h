// UTF-8: one code point read or written at a time, for the tokenizers. Not for: validating whole
// documents for JSON (core/json.h escapes what is not UTF-8).
#pragma once

#include <cstdint>
#include <string>

namespace dptrain {

// False, *i unmoved, where no well-formed RFC 3629 sequence begins. strict false: the old lenient
// reading, for tables stored before the check.
bool next_code_point(const std::string& s, size_t* i, uint32_t* cp, bool strict = true);
void append_utf8(std::string& out, uint32_t cp);

} // namespace dptrain
