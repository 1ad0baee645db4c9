// zip::Archive over libzip: opened with consistency checks, members read whole (CRC-checked),
// every error one line naming file and member. Not for: writing archives.
#include "dptrain/tools/zip.h"

#include "dptrain/core/error.h"

#include <zip.h>

#include <cerrno>
#include <cstring>

namespace dptrain::zip {

namespace {

const char* const kResave = "write it again with np.savez or np.savez_compressed";

std::string open_error(int code, const std::string& path) {
    switch (code) {
    case ZIP_ER_NOENT:
    case ZIP_ER_OPEN:
        return strfmt("%s: cannot open it: %s; check the --input path", path.c_str(), std::strerror(errno ? errno : ENOENT));
    case ZIP_ER_NOZIP:
        return strfmt("%s: not a zip archive (.npz): no end-of-central-directory record (truncated, or another kind of "
                      "file); %s",
                      path.c_str(), kResave);
    case ZIP_ER_INCONS:
        return strfmt("%s: truncated or corrupt: its central directory does not match its contents; %s", path.c_str(),
                      kResave);
    default: {
        zip_error_t e;
        zip_error_init_with_code(&e, code);
        std::string m = strfmt("%s: cannot read it as a zip archive: %s; %s", path.c_str(), zip_error_strerror(&e), kResave);
        zip_error_fini(&e);
        return m;
    }
    }
}

std::string read_error(zip_error_t* e, const std::string& where) {
    switch (zip_error_code_zip(e)) {
    case ZIP_ER_CRC: return where + ": CRC mismatch (the file is corrupt); " + kResave;
    case ZIP_ER_ZLIB:
    case ZIP_ER_COMPRESSED_DATA: return where + ": the compressed data is corrupt; " + kResave;
    case ZIP_ER_EOF:
    case ZIP_ER_READ: return where + ": truncated: its data runs past the end of the file; " + kResave;
    case ZIP_ER_ENCRNOTSUPP:
    case ZIP_ER_NOPASSWD: return where + ": encrypted; save the arrays again without encryption (np.savez)";
    case ZIP_ER_COMPNOTSUPP: return where + ": a compression method other than stored and deflate; " + kResave;
    default: return strfmt("%s: %s; %s", where.c_str(), zip_error_strerror(e), kResave);
    }
}

} // namespace

Archive Archive::open(const std::string& path) {
    int code = 0;
    errno = 0;
    ::zip* z = zip_open(path.c_str(), ZIP_RDONLY | ZIP_CHECKCONS, &code);
    if (!z) throw UserError(open_error(code, path));
    Archive a;
    a.path_ = path;
    a.zip_ = std::shared_ptr<::zip>(z, [](::zip* p) { zip_discard(p); });
    const zip_int64_t n = zip_get_num_entries(z, 0);
    for (zip_int64_t i = 0; i < n; ++i) {
        zip_stat_t st;
        zip_stat_init(&st);
        if (zip_stat_index(z, (zip_uint64_t)i, 0, &st) != 0 || !(st.valid & ZIP_STAT_NAME) || !(st.valid & ZIP_STAT_SIZE))
            throw UserError(strfmt("%s: central directory entry %lld is corrupt; %s", path.c_str(), (long long)i, kResave));
        a.members_.push_back({st.name, (uint64_t)i, (uint64_t)st.size});
    }
    return a;
}

const Member* Archive::find(const std::string& name) const {
    for (const Member& m : members_)
        if (m.name == name) return &m;
    return nullptr;
}

std::string Archive::read(const Member& m) const {
    const std::string where = path_ + ": member " + m.name;
    // Deflate expands at most ~1032x: a larger claim is a corrupt directory, not an allocation to try.
    zip_stat_t st;
    zip_stat_init(&st);
    if (zip_stat_index(zip_.get(), m.index, 0, &st) == 0 && (st.valid & ZIP_STAT_COMP_SIZE) &&
        m.usize / 1032 > st.comp_size + 1)
        throw UserError(strfmt("%s: sizes in the directory are inconsistent (%llu compressed, %llu uncompressed); %s",
                               where.c_str(), (unsigned long long)st.comp_size, (unsigned long long)m.usize, kResave));
    zip_file_t* f = zip_fopen_index(zip_.get(), m.index, 0);
    if (!f) throw UserError(read_error(zip_get_error(zip_.get()), where));
    std::string data(m.usize, '\0');
    zip_uint64_t done = 0;
    while (done < m.usize) {
        const zip_int64_t got = zip_fread(f, &data[done], m.usize - done);
        if (got <= 0) {
            std::string msg = got < 0 ? read_error(zip_file_get_error(f), where)
                                      : where + ": truncated: it ends before its stated size; " + kResave;
            zip_fclose(f);
            throw UserError(msg);
        }
        done += (zip_uint64_t)got;
    }
    // The CRC is checked once the member has been read to its end: a read past it reports it.
    char extra;
    const zip_int64_t tail = zip_fread(f, &extra, 1);
    std::string msg = tail < 0 ? read_error(zip_file_get_error(f), where) : "";
    if (tail > 0) msg = where + ": longer than its stated size; " + std::string(kResave);
    zip_fclose(f);
    if (!msg.empty()) throw UserError(msg);
    return data;
}

} // namespace dptrain::zip
