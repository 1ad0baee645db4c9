// verify_values: a dataset's every value read once and checked.
#include "dptrain/data/verify.h"

#include "dptrain/core/error.h"
#include "dptrain/core/files.h"
#include "dptrain/data/h5.h"
#include "dptrain/data/shards.h"
#include "dptrain/data/stage.h"
#include "dptrain/data/tokens.h"

#include <cmath>
#include <limits>
#include <numeric>
#include <set>
#include <vector>

namespace dptrain {

namespace {

constexpr int kRows = 4096;  // rows per read
const char* const kShardHint = "make shards with `dptrain-data ingest`, `synth` or `text` (format: data/README.md)";

// Every feature of the split finite; the labels are checked by the reads themselves.
void check_features(ShardSet& s) {
    const size_t D = (size_t)s.dim();
    std::vector<long> idx(kRows);
    std::vector<float> x((size_t)kRows * D);
    std::vector<int> y(kRows);
    for (long first = 0; first < s.num_samples(); first += kRows) {
        const int n = (int)std::min<long>(kRows, s.num_samples() - first);
        std::iota(idx.begin(), idx.begin() + n, first);
        s.read_rows(idx.data(), n, x.data(), y.data());
        for (size_t k = 0; k < (size_t)n * D; ++k)
            if (!std::isfinite(x[k]))
                throw UserError(strfmt("%s, feature %zu = %g: not a finite number; fix or drop that row",
                                       s.where(first + (long)(k / D)).c_str(), k % D, (double)x[k]));
    }
}

bool holds_tokens(const std::string& dir) {
    const std::string first = find_shards(dir, "train", kShardHint).front();
    std::lock_guard<std::mutex> g(h5::lock());
    h5::Hid f = h5::open_file(first, kShardHint);
    return H5Lexists(f.get(), "tokens", H5P_DEFAULT) > 0;
}

} // namespace

long check_manifest(const std::string& dir, int streams, int part, int parts, bool (*give_up)(),
                    const std::function<void()>& alive) {
    if (alive) alive();  // from the first look at the directory: a filesystem that hangs there is seen
    std::set<std::string> listed;
    for (const auto& entry : read_sums(dir)) listed.insert(entry.second);
    for (const char* split : {"train", "val"})
        for (const std::string& path : find_shards(dir, split, kShardHint)) {
            const std::string name = path.substr(path.rfind('/') + 1);
            if (!listed.count(name))
                throw UserError(strfmt("%s is not in %s/SHA256SUMS; if the set changed on purpose, rewrite it with "
                                       "`%s verify --update-sums %s`",
                                       path.c_str(), dir.c_str(), runnable("dptrain-data").c_str(), dir.c_str()));
        }
    return check_sums(dir, streams, false, part, parts, give_up, alive);
}

std::string verify_values(const std::string& dir) {
    if (holds_tokens(dir)) {
        long tokens[2];
        int shards[2];
        std::string vocab;
        int i = 0;
        for (const char* split : {"train", "val"}) {
            TokenShardSet s = TokenShardSet::open(dir, split, 1, 0, false);
            s.check_ids(0, 1, std::numeric_limits<double>::infinity());
            tokens[i] = s.num_tokens();
            shards[i++] = s.num_shards();
            vocab = strfmt("%s vocabulary of %d", s.tokenizer().name(), s.tokenizer().vocab_size());
        }
        return strfmt("tokens: %ld train + %ld val tokens in %d + %d shards: every id inside the %s", tokens[0],
                      tokens[1], shards[0], shards[1], vocab.c_str());
    }
    long samples[2];
    int shards[2], dim = 0, classes = 0, i = 0;
    for (const char* split : {"train", "val"}) {
        ShardSet s = ShardSet::open(dir, split, kRows);
        if (i == 1 && (s.dim() != dim || s.num_classes() != classes))
            throw UserError(strfmt("%s: validation shards have %d features / %d classes, training shards %d / %d; make "
                                   "them again together",
                                   dir.c_str(), s.dim(), s.num_classes(), dim, classes));
        check_features(s);
        samples[i] = s.num_samples();
        shards[i++] = s.num_shards();
        dim = s.dim();
        classes = s.num_classes();
    }
    return strfmt("tabular: %ld train + %ld val samples in %d + %d shards, %d features: every feature finite, every "
                  "label in [0, %d)",
                  samples[0], samples[1], shards[0], shards[1], dim, classes);
}

} // namespace dptrain
