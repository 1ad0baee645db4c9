// The text of a corpus of many files for dptrain-data text: --input values expanded to files and
// the files read and joined. Not for: tokenizing or writing shards (dptrain_data.cpp).
#include "dptrain/tools/text_files.h"

#include "dptrain/core/error.h"
#include "dptrain/core/utf8.h"

#include <glob.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

namespace dptrain {

std::vector<std::string> text_files(const std::vector<std::string>& inputs) {
    namespace fs = std::filesystem;
    std::vector<std::string> files;
    for (const std::string& in : inputs) {
        std::vector<std::string> found;
        std::error_code ec;
        if (in.find_first_of("*?[") != std::string::npos) {
            glob_t g;
            if (glob(in.c_str(), 0, nullptr, &g) == 0)
                for (size_t i = 0; i < g.gl_pathc; ++i)
                    if (fs::is_regular_file(g.gl_pathv[i], ec)) found.push_back(g.gl_pathv[i]);
            globfree(&g);
        } else if (fs::is_directory(in, ec)) {
            for (auto it = fs::recursive_directory_iterator(in, ec); !ec && it != fs::recursive_directory_iterator();
                 it.increment(ec)) {
                const std::string name = it->path().filename().string();
                if (!name.empty() && name[0] == '.') {
                    if (it->is_directory(ec)) it.disable_recursion_pending();
                    continue;
                }
                if (it->is_regular_file(ec)) found.push_back(it->path().string());
            }
            if (ec) throw UserError(strfmt("text: --input %s: cannot list it: %s", in.c_str(), ec.message().c_str()));
        } else if (fs::exists(in, ec)) {
            found.push_back(in);
        } else {
            throw UserError(strfmt("text: --input %s: no such file or directory", in.c_str()));
        }
        if (found.empty())
            throw UserError(strfmt("text: --input %s: no files there; give text files, directories or patterns",
                                   in.c_str()));
        std::sort(found.begin(), found.end());
        files.insert(files.end(), found.begin(), found.end());
    }
    return files;
}

std::string read_texts(const std::vector<std::string>& files, bool newlines, std::vector<size_t>* ends) {
    std::string data;
    char buf[1 << 16];
    for (const std::string& path : files) {
        FILE* in = std::fopen(path.c_str(), "rb");
        if (!in) throw UserError(strfmt("text: --input %s: cannot open it: %s", path.c_str(), std::strerror(errno)));
        size_t got;
        while ((got = std::fread(buf, 1, sizeof buf, in)) > 0) data.append(buf, got);
        const bool bad = std::ferror(in);
        std::fclose(in);
        if (bad) throw UserError(strfmt("text: --input %s: read failed", path.c_str()));
        if (newlines && files.size() > 1 && !data.empty() && data.back() != '\n') data.push_back('\n');
        if (ends) ends->push_back(data.size());
    }
    return data;
}

void check_utf8(const std::vector<std::string>& files, const std::string& data, const std::vector<size_t>& ends,
                const std::string& tokenizer) {
    uint32_t cp;
    size_t i = 0;
    while (i < data.size() && next_code_point(data, &i, &cp)) {}
    if (i >= data.size()) return;
    const size_t f = (size_t)(std::upper_bound(ends.begin(), ends.end(), i) - ends.begin());
    const size_t start = f == 0 ? 0 : ends[f - 1];
    const long line = 1 + std::count(data.begin() + (std::ptrdiff_t)start, data.begin() + (std::ptrdiff_t)i, '\n');
    throw UserError(strfmt("text: --input %s: not UTF-8 at line %ld (byte %zu of the file: 0x%02X); the %s tokenizer "
                           "reads UTF-8: convert the file (from Latin-1: iconv -f latin1 -t utf-8), or use --tokenizer "
                           "byte or gpt2, which take any bytes",
                           files[std::min(f, files.size() - 1)].c_str(), line, i - start, (unsigned char)data[i],
                           tokenizer.c_str()));
}

} // namespace dptrain
