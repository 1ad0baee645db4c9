// A text corpus of many files, for dptrain-data text. Not for: tokenizing it.
#pragma once

#include <string>
#include <vector>

namespace dptrain {

// Files, directories (hidden files left out) and globs, in sorted order, so the corpus is the
// same on every run. Throws UserError naming an input that gives no file.
std::vector<std::string> text_files(const std::vector<std::string>& inputs);

// newlines: a missing final newline is added, so one file's last line does not join the next's.
std::string read_texts(const std::vector<std::string>& files, bool newlines = true, std::vector<size_t>* ends = nullptr);

// Names the file, line and byte of the first invalid UTF-8, and the fix.
void check_utf8(const std::vector<std::string>& files, const std::string& data, const std::vector<size_t>& ends,
                const std::string& tokenizer);

} // namespace dptrain
