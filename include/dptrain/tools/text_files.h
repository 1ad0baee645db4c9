// A text corpus of many files (text_files.cpp), for dptrain-data text.
#pragma once

#include <string>
#include <vector>

namespace dptrain {

// --input values: files, directories (every regular file beneath, hidden ones left out) and glob
// patterns, each directory's and pattern's files in sorted order. Throws UserError naming an input
// that gives no file.
std::vector<std::string> text_files(const std::vector<std::string>& inputs);

// The files' text, one after the other; with several files and `newlines`, each ends in a newline
// (one is added where a file lacks it, so that the last line of one does not run into the first
// of the next). `ends`, when given, receives where each file's text ends.
std::string read_texts(const std::vector<std::string>& files, bool newlines = true, std::vector<size_t>* ends = nullptr);

// Throws UserError naming the file, the line and the byte where `data` (read_texts' result, with its
// `ends`) first is not UTF-8, and the fix; `tokenizer` names the tokenizer that needs UTF-8.
void check_utf8(const std::vector<std::string>& files, const std::string& data, const std::vector<size_t>& ends,
                const std::string& tokenizer);

} // namespace dptrain
