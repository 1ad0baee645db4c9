// Byte-level BPE: GPT-2's files, the table kept with the data, and encoding (the tokenizer.json
// form's too). Not for: reading or writing tokenizer.json (bpe_json.cpp), or choosing a tokenizer
// (tokenizer.cpp).
#define PCRE2_CODE_UNIT_WIDTH 8
#include "dptrain/data/bpe.h"

#include "dptrain/core/error.h"
#include "dptrain/core/utf8.h"

#include <nlohmann/json.hpp>
#include <pcre2.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <string_view>

namespace dptrain {

namespace {

// GPT-2's encoder.py pre-tokenizer, verbatim: its ids depend on it.
constexpr const char* kPattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr size_t kCacheMax = 1 << 18;  // pieces remembered; a corpus's words repeat
constexpr size_t kCachedPieceMax = 256;  // longer ones are rare and costly to keep
constexpr size_t kScanPieceMax = 16;  // shorter pieces are merged by rescanning, longer ones by heap

bool printable_byte(int b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); }

struct ByteTable {
    uint32_t cp[256];
    int byte_of[512];  // code point -> byte, -1 for none (every code point is below 324)
    ByteTable() {
        for (int& b : byte_of) b = -1;
        int extra = 0;
        for (int b = 0; b < 256; ++b) {
            cp[b] = printable_byte(b) ? (uint32_t)b : (uint32_t)(256 + extra++);
            byte_of[cp[b]] = b;
        }
    }
};

const ByteTable& byte_table() {
    static const ByteTable t;
    return t;
}

// GPT-2's printable form of a token -> its bytes; false when it holds a character outside the table.
bool bytes_of_printable(const std::string& s, std::string* out) {
    out->clear();
    for (size_t i = 0; i < s.size();) {
        uint32_t cp;
        if (!next_code_point(s, &i, &cp) || cp >= 512 || byte_table().byte_of[cp] < 0) return false;
        out->push_back((char)byte_table().byte_of[cp]);
    }
    return !out->empty();
}

std::string read_whole(const std::string& path, const char* option) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream all;
    if (in) all << in.rdbuf();
    if (!in || in.bad())
        throw UserError(strfmt("%s %s: cannot read: %s", option, path.c_str(), std::strerror(errno)));
    return all.str();
}

uint64_t pair_key(int a, int b) { return (uint64_t)(uint32_t)a << 32 | (uint32_t)b; }

// A candidate merge in Gpt2Bpe::merge_piece's heap.
struct MergePair {
    int rank, merged;       // the merge's rank and the id it makes
    int left, right;        // the two symbols' positions in the piece
    int left_id, right_id;  // their ids when the pair was found
    bool operator>(const MergePair& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
};

struct MergeScratch {           // a piece of n bytes as a linked list of symbols
    std::vector<int> id;        // (n) the symbol starting at each position; -1 once merged into its left
    std::vector<int> next, prev;  // (n) neighbouring symbols' positions, -1 at the ends
    std::vector<MergePair> heap, made;  // pairs to merge; pairs the current round made
};

struct Builder {  // what the files or the table hold, before the checks of Gpt2Bpe::build
    std::vector<std::string> tokens, merges;
    std::string where;
};

} // namespace

uint32_t gpt2_printable_of(unsigned char b) { return byte_table().cp[b]; }

const char* gpt2_pretokenizer_pattern() { return kPattern; }

Gpt2Bpe::~Gpt2Bpe() { pcre2_code_free(static_cast<pcre2_code*>(regex_)); }

std::shared_ptr<const Gpt2Bpe> Gpt2Bpe::parse(const std::string& encoder_json, const std::string& merges,
                                              const std::string& where) {
    Builder b;
    b.where = where;
    nlohmann::json enc;
    try {
        enc = nlohmann::json::parse(encoder_json);
    } catch (const nlohmann::json::exception& e) {
        throw UserError(strfmt("%s: the encoder is not JSON (%s); give GPT-2's encoder.json or vocab.json",
                               where.c_str(), e.what()));
    }
    if (!enc.is_object() || enc.empty())
        throw UserError(strfmt("%s: the encoder must be a JSON object of token -> id", where.c_str()));
    b.tokens.resize(enc.size());
    for (auto it = enc.begin(); it != enc.end(); ++it) {
        const nlohmann::json& v = it.value();
        if (!v.is_number_integer() || v.get<long long>() < 0 || v.get<long long>() >= (long long)enc.size() ||
            !b.tokens[v.get<size_t>()].empty())
            throw UserError(strfmt("%s: token \"%s\" has id %s; the ids must be 0..%zu, each once", where.c_str(),
                                   it.key().c_str(), v.dump().c_str(), enc.size() - 1));
        if (it.key().empty()) throw UserError(strfmt("%s: the empty string is not a token", where.c_str()));
        b.tokens[v.get<size_t>()] = it.key();
    }
    std::istringstream in(merges);
    std::string line;
    for (bool first = true; std::getline(in, line); first = false) {
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if ((first && line.rfind("#version", 0) == 0) || line.empty()) continue;
        b.merges.push_back(line);
    }
    return build(std::move(b.tokens), std::move(b.merges), b.where);
}

std::shared_ptr<const Gpt2Bpe> Gpt2Bpe::load(const std::string& encoder_path, const std::string& merges_path) {
    const std::string encoder = read_whole(encoder_path, "--encoder");
    return parse(encoder, read_whole(merges_path, "--merges"), encoder_path + " + " + merges_path);
}

std::shared_ptr<const Gpt2Bpe> Gpt2Bpe::from_table(const std::string& table) {
    Builder b;
    b.where = "the gpt2 tokenizer table";
    std::istringstream in(table);
    std::string line;
    long n = -1;
    JsonForm json;
    const int json_version = table.rfind("bpe-json 1\n", 0) == 0 ? 1 : table.rfind("bpe-json 2\n", 0) == 0 ? 2 : 0;
    const bool json_form = json_version > 0;
    if (json_form) {
        b.where = "the bpe tokenizer table";
        std::getline(in, line);
        json = read_json_form(in, json_version);
    } else if (!std::getline(in, line) || line != "gpt2-bpe 1") {
        throw UserError("the gpt2 tokenizer table is damaged (its header); write the shards or checkpoint again");
    }
    if (!(in >> n) || n < 256 || n > INT32_MAX)
        throw UserError(b.where + " is damaged (its size); write the shards or checkpoint again");
    std::getline(in, line);
    b.tokens.resize((size_t)n);
    for (std::string& t : b.tokens)
        if (!std::getline(in, t)) throw UserError("the gpt2 tokenizer table is truncated");
    while (std::getline(in, line)) b.merges.push_back(line);
    return build(std::move(b.tokens), std::move(b.merges), b.where, json_form ? &json : nullptr);
}

// The pattern (a JSON string), ignore_merges (0 or 1), the special tokens' count and each as
// `ID "CONTENT"`; version 2: then `N ID... M ID...`, the ids before and after a sequence.
Gpt2Bpe::JsonForm Gpt2Bpe::read_json_form(std::istream& in, int version) {
    JsonForm json;
    const char* damaged = "the bpe tokenizer table is damaged (%s); write the shards or checkpoint again";
    std::string line;
    long specials = -1;
    int ignore = -1;
    try {
        std::getline(in, line);
        json.pattern = nlohmann::json::parse(line).get<std::string>();
    } catch (const nlohmann::json::exception&) {
        throw UserError(strfmt(damaged, "its pattern"));
    }
    if (!(in >> ignore >> specials) || ignore < 0 || ignore > 1 || specials < 0 || specials > (1 << 20))
        throw UserError(strfmt(damaged, "its header"));
    json.ignore_merges = ignore == 1;
    for (long i = 0; i < specials; ++i) {
        long id = -1;
        if (!(in >> id) || !std::getline(in, line) || line.size() < 2 || id < 0 || id > INT32_MAX)
            throw UserError(strfmt(damaged, "its special tokens"));
        try {
            json.specials.emplace_back((int)id, nlohmann::json::parse(line.substr(1)).get<std::string>());
        } catch (const nlohmann::json::exception&) {
            throw UserError(strfmt(damaged, "its special tokens"));
        }
    }
    for (std::vector<int>* ids : {&json.prefix, &json.suffix}) {
        long n = version == 2 ? -1 : 0;
        if (version == 2 && (!(in >> n) || n < 0 || n > 64)) throw UserError(strfmt(damaged, "its sequence template"));
        for (long i = 0; i < n; ++i) {
            long id = -1;
            if (!(in >> id) || id < 0 || id > INT32_MAX) throw UserError(strfmt(damaged, "its sequence template"));
            ids->push_back((int)id);
        }
    }
    if (version == 2) std::getline(in, line);  // the template line's end
    return json;
}

std::shared_ptr<const Gpt2Bpe> Gpt2Bpe::build(std::vector<std::string> tokens, std::vector<std::string> merges,
                                              const std::string& where, const JsonForm* json) {
    Builder b{std::move(tokens), std::move(merges), where};
    std::shared_ptr<Gpt2Bpe> t(new Gpt2Bpe());
    t->bytes_.resize(b.tokens.size());
    for (size_t id = 0; id < b.tokens.size(); ++id) {
        if (!bytes_of_printable(b.tokens[id], &t->bytes_[id]))
            throw UserError(strfmt("%s: token %zu \"%s\" is not in GPT-2's byte-level form (its characters must come "
                                   "from GPT-2's byte-to-unicode table)",
                                   b.where.c_str(), id, b.tokens[id].c_str()));
        t->ids_.emplace(t->bytes_[id], (int)id);
    }
    for (int c = 0; c < 256; ++c) {
        auto it = t->ids_.find(std::string(1, (char)c));
        if (it == t->ids_.end())
            throw UserError(strfmt("%s: no token for byte 0x%02X; a byte-level BPE has one for every byte",
                                   b.where.c_str(), c));
        t->byte_id_[c] = it->second;
    }
    std::unordered_map<std::string, int> printable;
    for (size_t id = 0; id < b.tokens.size(); ++id) printable.emplace(b.tokens[id], (int)id);
    for (size_t rank = 0; rank < b.merges.size(); ++rank) {
        const std::string& m = b.merges[rank];
        const size_t sp = m.find(' ');
        auto l = printable.find(m.substr(0, sp)), r = printable.find(sp == std::string::npos ? "" : m.substr(sp + 1));
        auto both = sp == std::string::npos || l == printable.end() || r == printable.end()
                        ? printable.end()
                        : printable.find(m.substr(0, sp) + m.substr(sp + 1));
        if (both == printable.end())
            throw UserError(strfmt("%s: merge %zu \"%s\" is not two tokens whose join is a token", b.where.c_str(),
                                   rank + 1, m.c_str()));
        t->merge_.emplace(pair_key(l->second, r->second), std::make_pair((int)rank, both->second));
    }
    t->endoftext_ = t->id_of("<|endoftext|>");
    if (json) {  // special tokens: in the vocabulary, or the next ids after it, in order
        t->json_form_ = true;
        t->json_ = *json;
        std::sort(t->json_.specials.begin(), t->json_.specials.end());
        for (const auto& [id, content] : t->json_.specials) {
            if (id == (int)t->bytes_.size()) t->bytes_.push_back(content);
            else if (id > (int)t->bytes_.size())
                throw UserError(strfmt("%s: special token \"%s\" has id %d, but the ids before it end at %zu; added "
                                       "tokens must follow the vocabulary without gaps",
                                       b.where.c_str(), content.c_str(), id, t->bytes_.size()));
            if (content == "<|endoftext|>" || content == "<|end_of_text|>") t->endoftext_ = id;
        }
        for (const std::vector<int>* around : {&t->json_.prefix, &t->json_.suffix})
            for (int id : *around)
                if (id < 0 || id >= (int)t->bytes_.size())
                    throw UserError(strfmt("%s: the post_processor puts id %d around a sequence, outside the %zu "
                                           "tokens",
                                           b.where.c_str(), id, t->bytes_.size()));
    }
    t->tokens_ = std::move(b.tokens);
    t->merges_ = std::move(b.merges);
    t->compile_regex(b.where);
    return t;
}

bool Gpt2Bpe::is_special(int id) const {
    if (id == endoftext_) return true;
    for (const auto& s : json_.specials)
        if (s.first == id) return true;
    return false;
}

void Gpt2Bpe::compile_regex(const std::string& where) {
    int err = 0;
    PCRE2_SIZE at = 0;
    const std::string& pattern = json_form_ ? json_.pattern : std::string(kPattern);
    pcre2_code* code = pcre2_compile((PCRE2_SPTR)pattern.c_str(), pattern.size(),
                                     PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &at, nullptr);
    if (!code) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        throw UserError(strfmt("%s: the pre-tokenizer pattern does not compile at offset %zu: %s", where.c_str(),
                               (size_t)at, (const char*)msg));
    }
    // Where PCRE2 has no JIT for this CPU, pcre2_match interprets the pattern instead.
    jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
    regex_ = code;
}

std::string Gpt2Bpe::table() const {
    // Version 2 only with ids around a sequence: version 1's tables stay as they were written.
    const bool around = !json_.prefix.empty() || !json_.suffix.empty();
    std::string out = !json_form_ ? "gpt2-bpe 1\n" : around ? "bpe-json 2\n" : "bpe-json 1\n";
    if (json_form_) {
        out += nlohmann::json(json_.pattern).dump() + "\n" + (json_.ignore_merges ? "1" : "0") + "\n" +
               std::to_string(json_.specials.size()) + "\n";
        for (const auto& [id, content] : json_.specials)
            out += std::to_string(id) + " " + nlohmann::json(content).dump() + "\n";
        if (around) {
            for (const std::vector<int>* ids : {&json_.prefix, &json_.suffix}) {
                out += std::to_string(ids->size());
                for (int id : *ids) out += " " + std::to_string(id);
                out += ids == &json_.prefix ? " " : "\n";
            }
        }
    }
    out += std::to_string(tokens_.size()) + "\n";
    for (const std::string& t : tokens_) out += t + "\n";
    for (const std::string& m : merges_) out += m + "\n";
    return out;
}

// By hand: ordered_json's key lookup is quadratic in the vocabulary (docs/BENCHMARKS.md,
// "Sampling over a GPT-2-sized vocabulary").
std::string Gpt2Bpe::encoder_json() const {
    std::string out = "{";
    for (size_t id = 0; id < tokens_.size(); ++id)
        out += (id ? "," : "") + nlohmann::json(tokens_[id]).dump() + ":" + std::to_string(id);
    return out + "}";
}

std::string Gpt2Bpe::merges_text() const {
    std::string out = "#version: 0.2\n";
    for (const std::string& m : merges_) out += m + "\n";
    return out;
}

int Gpt2Bpe::id_of(const std::string& bytes) const {
    auto it = ids_.find(bytes);
    return it == ids_.end() ? -1 : it->second;
}

// Special tokens first (the leftmost, and the longest there), the text between them by the regex.
void Gpt2Bpe::encode(const std::string& text, std::vector<int>* ids) const {
    if (json_.specials.empty()) return encode_text(text.data(), text.size(), ids);
    size_t at = 0;
    while (at < text.size()) {
        size_t best = std::string::npos, len = 0;
        int id = -1;
        for (const auto& [sid, content] : json_.specials) {
            const size_t p = text.find(content, at);
            if (p != std::string::npos && (p < best || (p == best && content.size() > len)))
                best = p, len = content.size(), id = sid;
        }
        if (best == std::string::npos) best = text.size();
        encode_text(text.data() + at, best - at, ids);
        if (id < 0) break;
        ids->push_back(id);
        at = best + len;
    }
}

void Gpt2Bpe::encode_text(const char* text_p, size_t text_n, std::vector<int>* ids) const {
    const std::string_view text(text_p, text_n);
    auto* code = static_cast<pcre2_code*>(regex_);
    std::unique_ptr<pcre2_match_data, void (*)(pcre2_match_data*)> md(
        pcre2_match_data_create_from_pattern(code, nullptr), pcre2_match_data_free);
    if (!md) throw std::bad_alloc();
    const auto* s = (PCRE2_SPTR)text.data();
    const size_t n = text.size();
    size_t at = 0;
    while (at < n) {
        // pcre2_jit_match skips argument checks worth a tenth of a piece's time.
        const int rc = jit_ ? pcre2_jit_match(code, s, n, at, 0, md.get(), nullptr)
                            : pcre2_match(code, s, n, at, 0, md.get(), nullptr);
        if (rc == PCRE2_ERROR_NOMATCH) {  // only invalid bytes remain
            encode_piece(text.data() + at, n - at, ids);
            break;
        }
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            throw UserError(strfmt("the gpt2 pre-tokenizer failed at byte %zu: %s", at, (const char*)msg));
        }
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
        if (ov[0] > at) encode_piece(text.data() + at, ov[0] - at, ids);  // invalid UTF-8 before the match
        const size_t end = ov[1] > ov[0] ? ov[1] : ov[0] + 1;  // every alternative is non-empty
        encode_piece(text.data() + ov[0], end - ov[0], ids);
        at = end;
    }
}

// GPT-2's bpe(): merge the lowest-ranked adjacent pair everywhere until none is a merge.
void Gpt2Bpe::encode_piece(const char* p, size_t n, std::vector<int>* ids) const {
    if (n == 1) {
        ids->push_back(byte_id_[(unsigned char)*p]);
        return;
    }
    std::string key(p, n);
    if (json_.ignore_merges) {  // a piece that is a token is that token, whatever the merges would make
        auto it = ids_.find(key);
        if (it != ids_.end()) {
            ids->push_back(it->second);
            return;
        }
    }
    {
        std::lock_guard<std::mutex> g(cache_mu_);
        auto it = cache_.find(key);
        if (it != cache_.end()) {
            ids->insert(ids->end(), it->second.begin(), it->second.end());
            return;
        }
    }
    std::vector<int> w;
    if (n <= kScanPieceMax) scan_piece(p, n, &w);
    else merge_piece(p, n, &w);
    ids->insert(ids->end(), w.begin(), w.end());
    if (n > kCachedPieceMax) return;
    std::lock_guard<std::mutex> g(cache_mu_);
    if (cache_.size() >= kCacheMax) cache_.clear();
    cache_.emplace(std::move(key), std::move(w));
}

// bpe() as GPT-2 wrote it: fastest for short pieces, O(n^2) on long ones.
void Gpt2Bpe::scan_piece(const char* p, size_t n, std::vector<int>* out) const {
    std::vector<int>& w = *out;
    w.resize(n);
    for (size_t i = 0; i < n; ++i) w[i] = byte_id_[(unsigned char)p[i]];
    while (w.size() > 1) {
        int best = INT_MAX, merged = -1;
        uint64_t best_pair = 0;
        for (size_t i = 0; i + 1 < w.size(); ++i) {
            auto it = merge_.find(pair_key(w[i], w[i + 1]));
            if (it != merge_.end() && it->second.first < best)
                best = it->second.first, merged = it->second.second, best_pair = pair_key(w[i], w[i + 1]);
        }
        if (merged < 0) break;
        size_t k = 0;
        for (size_t i = 0; i < w.size();) {
            if (i + 1 < w.size() && pair_key(w[i], w[i + 1]) == best_pair) w[k++] = merged, i += 2;
            else w[k++] = w[i++];
        }
        w.resize(k);
    }
}

// bpe() in O(n log n): a linked list of symbols, a heap of merge pairs. Pairs a merge makes wait
// for the round's end, as in bpe(). Why: docs/NOTES.md, "Note [bpe heap merge]".
void Gpt2Bpe::merge_piece(const char* p, size_t n, std::vector<int>* out) const {
    // Short pieces reuse a thread's scratch; a long one's is freed after it.
    thread_local MergeScratch short_scratch;
    MergeScratch long_scratch;
    MergeScratch& m = n <= kCachedPieceMax ? short_scratch : long_scratch;
    std::vector<int>&id = m.id, &next = m.next, &prev = m.prev;
    id.resize(n), next.resize(n), prev.resize(n);
    for (size_t i = 0; i < n; ++i)
        id[i] = byte_id_[(unsigned char)p[i]], next[i] = (int)i + 1, prev[i] = (int)i - 1;
    next[n - 1] = -1;
    auto find = [&](int l, int r, std::vector<MergePair>* into) {
        if (l < 0 || r < 0) return;
        auto it = merge_.find(pair_key(id[(size_t)l], id[(size_t)r]));
        if (it != merge_.end())
            into->push_back(MergePair{it->second.first, it->second.second, l, r, id[(size_t)l], id[(size_t)r]});
    };
    m.heap.clear();
    for (size_t i = 0; i + 1 < n; ++i) find((int)i, (int)i + 1, &m.heap);
    const auto later = std::greater<MergePair>();
    std::make_heap(m.heap.begin(), m.heap.end(), later);
    while (!m.heap.empty()) {
        const int round = m.heap.front().rank;
        m.made.clear();
        while (!m.heap.empty() && m.heap.front().rank == round) {
            std::pop_heap(m.heap.begin(), m.heap.end(), later);
            const MergePair q = m.heap.back();
            m.heap.pop_back();
            if (id[(size_t)q.left] != q.left_id || next[(size_t)q.left] != q.right || id[(size_t)q.right] != q.right_id)
                continue;  // stale: one of its symbols has been merged since
            id[(size_t)q.left] = q.merged;
            id[(size_t)q.right] = -1;
            next[(size_t)q.left] = next[(size_t)q.right];
            if (next[(size_t)q.left] >= 0) prev[(size_t)next[(size_t)q.left]] = q.left;
            find(prev[(size_t)q.left], q.left, &m.made);
            find(q.left, next[(size_t)q.left], &m.made);
        }
        for (const MergePair& q : m.made) {
            m.heap.push_back(q);
            std::push_heap(m.heap.begin(), m.heap.end(), later);
        }
    }
    size_t k = 0;  // the symbols, left to right, to the front of id (position 0 is never merged away)
    for (int i = 0; i >= 0; i = next[(size_t)i]) id[k++] = id[(size_t)i];
    out->assign(id.begin(), id.begin() + (ptrdiff_t)k);
}

} // namespace dptrain
