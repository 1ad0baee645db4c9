// dptrain-data: makes datasets in dptrain's shard format (data/README.md).
//   dptrain-data synth --out DIR [--train-samples N] [--val-samples M] [--features D] [--classes K]
//                      [--shards S] [--seed X]
//   dptrain-data text --input FILE --out DIR [--vocab byte|char] [--val-fraction F] [--shards S]
// synth writes a learnable classification set: features ~ N(0, 1), labels = argmax of a fixed
// random teacher network (D -> H tanh -> K) plus a little label noise. Every sample is a pure
// function of (seed, index), so the data do not depend on the shard count.
#include "dptrain/error.h"
#include "dptrain/h5.h"
#include "dptrain/rng.h"
#include "dptrain/tokens.h"

#include <boost/program_options.hpp>

#include <sys/stat.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <vector>

namespace po = boost::program_options;
using namespace dptrain;

namespace {

struct Teacher {
    int D, H, K;
    std::vector<float> w1, w2;  // (H, D), (K, H)
    Teacher(int d, int h, int k, uint64_t seed) : D(d), H(h), K(k), w1((size_t)H * d), w2((size_t)k * H) {
        Rng r(stream_seed(seed, 0x7EAC4E2));
        for (auto& w : w1) w = r.normal() / std::sqrt((float)D);
        for (auto& w : w2) w = r.normal() * 2.0f / std::sqrt((float)H);
    }
    int label(const float* x) const {
        std::vector<float> h(H);
        for (int j = 0; j < H; ++j) {
            float s = 0;
            for (int i = 0; i < D; ++i) s += w1[(size_t)j * D + i] * x[i];
            h[j] = std::tanh(s);
        }
        int best = 0;
        float bv = -1e30f;
        for (int k = 0; k < K; ++k) {
            float s = 0;
            for (int j = 0; j < H; ++j) s += w2[(size_t)k * H + j] * h[j];
            if (s > bv) bv = s, best = k;
        }
        return best;
    }
};

// Sample `index` of a stream (train = 0, val = 1).
void make_sample(const Teacher& t, uint64_t seed, int stream, long index, float noise, float* x, int* y) {
    Rng r(stream_seed(seed ^ (0x5A5A5A5Aull * (stream + 1)), (uint64_t)index));
    for (int i = 0; i < t.D; ++i) x[i] = r.normal();
    *y = t.label(x);
    if (r.uniform() < noise) *y = (int)r.below((uint64_t)t.K);
}

void write_split(const std::string& dir, const std::string& split, int stream, long n, int shards,
                 const Teacher& t, uint64_t seed, float noise) {
    long base = n / shards, extra = n % shards, first = 0;
    for (int s = 0; s < shards; ++s) {
        long rows = base + (s < extra ? 1 : 0);
        std::vector<float> x((size_t)rows * t.D);
        std::vector<int> y(rows);
        for (long i = 0; i < rows; ++i) make_sample(t, seed, stream, first + i, noise, &x[(size_t)i * t.D], &y[i]);
        std::string path = strfmt("%s/%s-%05d-of-%05d.h5", dir.c_str(), split.c_str(), s, shards);
        h5::Hid f = h5::create_file(path);
        h5::write_dataset(f.get(), "/features", h5::Kind::f32, {(hsize_t)rows, (hsize_t)t.D}, x.data());
        h5::write_dataset(f.get(), "/labels", h5::Kind::i32, {(hsize_t)rows}, y.data());
        h5::write_attr_i64(f.get(), "num_classes", t.K);
        h5::write_attr_str(f.get(), "generator", strfmt("dptrain-data synth --seed %llu", (unsigned long long)seed));
        first += rows;
    }
}

// Parses a subcommand's options; prints its help and returns true for --help.
bool parse_or_help(int argc, char** argv, const po::options_description& desc) {
    po::variables_map vm;
    po::store(po::parse_command_line(argc, argv, desc), vm);
    po::notify(vm);
    if (!vm.count("help")) return false;
    std::cout << desc;
    return true;
}

void make_dirs(const std::string& out) {
    std::string cur;
    for (size_t i = 0; i <= out.size(); ++i) {
        if ((i == out.size() || out[i] == '/') && !cur.empty()) mkdir(cur.c_str(), 0755);
        if (i < out.size()) cur += out[i];
    }
}

int synth(int argc, char** argv) {
    std::string out;
    long train_n, val_n;
    int D, K, H, shards;
    unsigned long seed;
    float noise;
    po::options_description desc("dptrain-data synth: a learnable synthetic classification set", 100, 50);
    desc.add_options()("help,h", "print this help")(
        "out", po::value(&out)->default_value("data/synth"), "output directory")(
        "train-samples", po::value(&train_n)->default_value(131072), "training samples")(
        "val-samples", po::value(&val_n)->default_value(8192), "validation samples")(
        "features", po::value(&D)->default_value(32), "features per sample")(
        "classes", po::value(&K)->default_value(10), "classes")(
        "teacher-width", po::value(&H)->default_value(8), "hidden width of the random teacher network (harder: wider)")(
        "shards", po::value(&shards)->default_value(4), "training shards (validation: 1)")(
        "label-noise", po::value(&noise)->default_value(0.02f), "share of labels replaced by random ones")(
        "seed", po::value(&seed)->default_value(1), "seed");
    if (parse_or_help(argc, argv, desc)) return 0;
    if (train_n <= 0 || val_n <= 0 || D <= 0 || K < 2 || shards <= 0 || H <= 0 || shards > train_n || noise < 0 || noise > 1)
        throw UserError("synth: need --train-samples, --val-samples, --features > 0, --classes >= 2, "
                        "1 <= --shards <= --train-samples and --label-noise in [0, 1]");
    make_dirs(out);
    Teacher t(D, H, K, seed);
    write_split(out, "train", 0, train_n, shards, t, seed, noise);
    write_split(out, "val", 1, val_n, 1, t, seed, noise);
    std::printf("dptrain-data synth: %ld training samples in %d shards, %ld validation samples, %d features, %d classes "
                "-> %s (%.1f MB)\n",
                train_n, shards, val_n, D, K, out.c_str(), (train_n + val_n) * (D + 1) * 4.0 / 1e6);
    return 0;
}

void write_tokens(const std::string& path, const std::vector<int>& ids, size_t begin, size_t end, const Tokenizer& tok,
                  const std::string& source) {
    h5::Hid f = h5::create_file(path);
    hsize_t n = end - begin;
    if (tok.vocab_size() <= 65536) {
        std::vector<uint16_t> v(ids.begin() + begin, ids.begin() + end);
        h5::write_dataset(f.get(), "/tokens", h5::Kind::u16, {n}, v.data());
    } else {
        std::vector<uint32_t> v(ids.begin() + begin, ids.begin() + end);
        h5::write_dataset(f.get(), "/tokens", h5::Kind::u32, {n}, v.data());
    }
    h5::write_attr_i64(f.get(), "vocab_size", tok.vocab_size());
    h5::write_attr_str(f.get(), "tokenizer", tok.kind);
    if (tok.kind == "char") h5::write_attr_str(f.get(), "vocab", tok.table());
    h5::write_attr_str(f.get(), "source", source);
}

int text(int argc, char** argv) {
    std::string input, out, vocab;
    double val_fraction;
    int shards;
    po::options_description desc("dptrain-data text: token shards from a text file", 100, 50);
    desc.add_options()("help,h", "print this help")("input", po::value(&input)->default_value(""), "text file (UTF-8 for --vocab char)")(
        "out", po::value(&out)->default_value("data/text"), "output directory")(
        "vocab", po::value(&vocab)->default_value("char"),
        "byte (256 ids) | char (the text's characters, in code-point order)")(
        "val-fraction", po::value(&val_fraction)->default_value(0.1), "the text's tail kept for validation")(
        "shards", po::value(&shards)->default_value(1), "training shards (validation: 1)");
    if (parse_or_help(argc, argv, desc)) return 0;
    if (input.empty()) throw UserError("text: give the text file with --input FILE");
    if (vocab != "byte" && vocab != "char") throw UserError(strfmt("text: --vocab '%s' is unknown; use byte or char", vocab.c_str()));
    if (!(val_fraction > 0 && val_fraction < 1) || shards < 1)
        throw UserError("text: --val-fraction must be in (0, 1) and --shards >= 1");
    FILE* in = std::fopen(input.c_str(), "rb");
    if (!in) throw UserError(strfmt("text: --input %s: cannot open it: %s", input.c_str(), std::strerror(errno)));
    std::string data;
    char buf[1 << 16];
    size_t got;
    while ((got = std::fread(buf, 1, sizeof buf, in)) > 0) data.append(buf, got);
    std::fclose(in);
    Tokenizer tok = vocab == "byte" ? Tokenizer::from("byte", "") : Tokenizer::chars_of(data);
    std::vector<int> ids = tok.encode(data);
    size_t n_val = (size_t)(ids.size() * val_fraction), n_train = ids.size() - n_val;
    if (n_train < (size_t)shards * 2 || n_val < 2)
        throw UserError(strfmt("text: --input %s holds only %zu tokens: too little for %d shards and a validation split",
                               input.c_str(), ids.size(), shards));
    make_dirs(out);
    for (int s = 0; s < shards; ++s)
        write_tokens(strfmt("%s/train-%05d-of-%05d.h5", out.c_str(), s, shards), ids, n_train * s / shards,
                     n_train * (s + 1) / shards, tok, input);
    write_tokens(strfmt("%s/val-00000-of-00001.h5", out.c_str()), ids, n_train, ids.size(), tok, input);
    std::printf("dptrain-data text: %zu tokens from %s (%s vocabulary of %d) -> %zu training tokens in %d shard%s, "
                "%zu validation tokens, in %s\n",
                ids.size(), input.c_str(), tok.kind.c_str(), tok.vocab_size(), n_train, shards, shards == 1 ? "" : "s",
                n_val, out.c_str());
    return 0;
}

} // namespace

int main(int argc, char** argv) {
    std::string cmd = argc > 1 ? argv[1] : "";
    try {
        if (cmd == "synth") return synth(argc - 1, argv + 1);
        if (cmd == "text") return text(argc - 1, argv + 1);
        if (cmd == "-h" || cmd == "--help") {
            std::printf("usage: dptrain-data synth --out DIR [options]   (dptrain-data synth --help)\n"
                        "       dptrain-data text --input FILE --out DIR [options]   (dptrain-data text --help)\n");
            return 0;
        }
        std::fprintf(stderr, "dptrain-data: error: unknown command '%s'; use dptrain-data synth|text --help\n", cmd.c_str());
        return 2;
    } catch (const po::error& e) {
        std::fprintf(stderr, "dptrain-data: error: %s; see dptrain-data %s --help\n", e.what(), cmd.c_str());
        return 2;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "dptrain-data: error: %s\n", e.what());
        return 2;
    }
}
