// dptrain-data: makes datasets in dptrain's shard format (data/README.md).
//   dptrain-data synth --out DIR [--train-samples N] [--val-samples M] [--features D] [--classes K]
//                      [--shards S] [--seed X]
//   dptrain-data text --input FILE|DIR|PATTERN ... --out DIR [--tokenizer byte|char|gpt2 --encoder F --merges F]
//                     [--val-fraction F] [--shards S]
//   [mpirun -np R] dptrain-data ingest --input FILE [--input FILE ...] --out DIR [--format F] [--shards S] ...
//   dptrain-data tokens --input FILE [--input FILE ...] --vocab-size V|--encoder F --merges F --out DIR
//                       [--format F] [--split S]
//   dptrain-data verify DIR [--update-sums]
// synth writes a learnable classification set: features ~ N(0, 1), labels = argmax of a fixed
// random teacher network (D -> H tanh -> K) plus a little label noise. Every sample is a pure
// function of (seed, index), so the data do not depend on the shard count. ingest converts users'
// CSV / NumPy / HDF5 files (readers in ingest.h) and is the one subcommand that uses MPI.
// Not for: reading shards (shards.h, tokens.h).
#include "dptrain/core/check.h"
#include "dptrain/comm/communicator.h"
#include "dptrain/core/error.h"
#include "dptrain/data/h5.h"
#include "dptrain/tools/ingest.h"
#include "dptrain/tools/text_files.h"
#include "dptrain/tools/token_files.h"
#include "dptrain/core/rng.h"
#include "dptrain/data/tokens.h"
#include "dptrain/data/stage.h"
#include "dptrain/data/verify.h"
#include "dptrain/core/files.h"

#include <boost/program_options.hpp>
#include <mpi.h>

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <thread>
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

std::string shard_path(const std::string& dir, const std::string& split, int index, int of) {
    return strfmt("%s/%s-%05d-of-%05d.h5", dir.c_str(), split.c_str(), index, of);
}

// One tabular shard (data/README.md): /features float32 (rows, D), /labels int32 (rows) and the
// root attribute num_classes; `generator` records what made it. synth and ingest both write
// through here. Returns the file's size in bytes.
uint64_t write_tabular_shard(const std::string& path, const float* x, const int32_t* y, long rows, int D, int K,
                             const std::string& generator) {
    {
        std::lock_guard<std::mutex> g(h5::lock());
        h5::Hid f = h5::create_file(path);
        h5::write_dataset(f.get(), "/features", h5::Kind::f32, {(hsize_t)rows, (hsize_t)D}, x);
        h5::write_dataset(f.get(), "/labels", h5::Kind::i32, {(hsize_t)rows}, y);
        h5::write_attr_i64(f.get(), "num_classes", K);
        h5::write_attr_str(f.get(), "generator", generator);
    }  // closed here, so the size below is final
    struct stat st;
    return stat(path.c_str(), &st) == 0 ? (uint64_t)st.st_size : 0;
}

void write_split(const std::string& dir, const std::string& split, int stream, long n, int shards,
                 const Teacher& t, uint64_t seed, float noise) {
    for (int s = 0; s < shards; ++s) {
        long first, rows;
        ingest::shard_range(n, shards, s, &first, &rows);
        std::vector<float> x((size_t)rows * t.D);
        std::vector<int32_t> y(rows);
        for (long i = 0; i < rows; ++i) make_sample(t, seed, stream, first + i, noise, &x[(size_t)i * t.D], &y[i]);
        write_tabular_shard(shard_path(dir, split, s, shards), x.data(), y.data(), rows, t.D, t.K,
                            strfmt("dptrain-data synth --seed %llu", (unsigned long long)seed));
    }
}

// Parses a subcommand's options; for --help prints the options and `epilogue` (when `print`:
// under mpirun only rank 0 does) and returns true.
bool parse_or_help(int argc, char** argv, const po::options_description& desc, const char* epilogue = "",
                   bool print = true) {
    po::variables_map vm;
    po::store(po::parse_command_line(argc, argv, desc), vm);
    po::notify(vm);
    if (!vm.count("help")) return false;
    if (print) std::cout << desc << epilogue;
    return true;
}

void make_dirs(const std::string& out) { make_directories(out, "--out"); }

// Before any shard is written (under mpirun: by rank 0): --out exists and holds no shards of the
// splits about to be written (they would mix with ours, and they may be the user's only copy), or
// with --overwrite those shards are removed.
void prepare_out(const std::string& out, const std::vector<std::string>& splits, bool overwrite) {
    make_dirs(out);
    struct stat st;
    if (stat(out.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
        throw UserError(strfmt("--out %s: cannot create the directory (a file of that name, or no permission?)", out.c_str()));
    std::vector<std::string> old;
    DIR* d = opendir(out.c_str());
    if (!d) throw UserError(strfmt("--out %s: cannot list it: %s", out.c_str(), std::strerror(errno)));
    while (dirent* e = readdir(d)) {
        for (const std::string& split : splits) {
            int i = 0, of = 0, used = 0;
            std::string fmt = split + "-%5d-of-%5d.h5%n";
            if (std::sscanf(e->d_name, fmt.c_str(), &i, &of, &used) == 2 && used == (int)std::strlen(e->d_name))
                old.push_back(e->d_name);
        }
    }
    closedir(d);
    if (old.empty()) return;
    std::sort(old.begin(), old.end());
    if (!overwrite)
        throw UserError(strfmt("--out %s already holds %zu shard%s (%s%s); pass --overwrite to replace them, or choose "
                               "another --out",
                               out.c_str(), old.size(), old.size() == 1 ? "" : "s", old[0].c_str(),
                               old.size() > 1 ? ", ..." : ""));
    for (const std::string& name : old) {
        std::string p = out + "/" + name;
        if (unlink(p.c_str()) != 0)
            throw UserError(strfmt("%s: cannot remove the old shard: %s", p.c_str(), std::strerror(errno)));
    }
    // A manifest of the replaced shards would fail every later check: it goes with them.
    const std::string sums = out + "/SHA256SUMS";
    if (unlink(sums.c_str()) == 0)
        std::printf("removed %s (it listed the replaced shards); `%s verify %s` writes a new one\n", sums.c_str(),
                    runnable("dptrain-data").c_str(), out.c_str());
}

// ---- verify: every value of a dataset checked, and its SHA256SUMS manifest ----

const char* const kVerifyHelp = R"(
Reads every shard of DIR's train and val splits once: tabular features must be finite and labels
in [0, num_classes); token ids inside the vocabulary. The first bad value is named (shard, row
and feature, or offset and id) and the exit status is 2.
Then DIR/SHA256SUMS (sha256sum's format): written when absent, otherwise every file it lists is
checked against it and every shard must be listed; --update-sums rewrites it (after the values
pass) for a set that was changed on purpose. `dptrain --verify-data` checks the manifest at
start-up, and `dptrain --stage-dir` checks it when it copies the set.
)";

int verify_cmd(int argc, char** argv) {
    std::vector<std::string> dirs;
    int streams;
    bool update = false;
    po::options_description desc("dptrain-data verify DIR: check every value of a dataset and its SHA256SUMS", 100, 50);
    desc.add_options()("help,h", "print this help")("update-sums", po::bool_switch(&update),
                                                    "rewrite DIR/SHA256SUMS instead of checking it")(
        "streams", po::value(&streams)->default_value(4), "files hashed at once");
    po::options_description hidden;
    hidden.add_options()("dir", po::value(&dirs));
    po::positional_options_description pos;
    pos.add("dir", -1);
    po::options_description all;
    all.add(desc).add(hidden);
    po::variables_map vm;
    po::store(po::command_line_parser(argc, argv).options(all).positional(pos).run(), vm);
    po::notify(vm);
    if (vm.count("help")) {
        std::cout << desc << kVerifyHelp;
        return 0;
    }
    if (dirs.size() != 1) throw UserError("verify: give one dataset directory: dptrain-data verify DIR");
    if (streams < 1) throw UserError("verify: --streams must be at least 1");
    const std::string& dir = dirs[0];
    std::printf("dptrain-data verify: %s: %s\n", dir.c_str(), verify_values(dir).c_str());
    std::fflush(stdout);  // before any error line about the manifest
    struct stat st;
    const bool have = stat((dir + "/SHA256SUMS").c_str(), &st) == 0;
    if (have && !update) {
        const long n = check_manifest(dir, streams);
        std::printf("dptrain-data verify: %s/SHA256SUMS: all %ld files match\n", dir.c_str(), n);
    } else {
        const long n = write_sums(dir, streams);
        std::printf("dptrain-data verify: %s/SHA256SUMS %s (%ld files)\n", dir.c_str(), have ? "rewritten" : "written", n);
    }
    return 0;
}

int synth(int argc, char** argv) {
    std::string out;
    long train_n, val_n;
    int D, K, H, shards;
    unsigned long seed;
    float noise;
    bool overwrite = false;
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
        "seed", po::value(&seed)->default_value(1), "seed")(
        "overwrite", po::bool_switch(&overwrite), "replace the shards already in --out");
    if (parse_or_help(argc, argv, desc)) return 0;
    if (train_n <= 0 || val_n <= 0 || D <= 0 || K < 2 || shards <= 0 || H <= 0 || shards > train_n || noise < 0 || noise > 1)
        throw UserError("synth: need --train-samples, --val-samples, --features > 0, --classes >= 2, "
                        "1 <= --shards <= --train-samples and --label-noise in [0, 1]");
    prepare_out(out, {"train", "val"}, overwrite);
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
    if (tok.has_table()) h5::write_text(f.get(), "vocab", tok.table());
    h5::write_attr_str(f.get(), "source", source);
}

// What --tokenizer and its options ask for.
struct TextTokenizer {
    std::string kind, encoder, merges, sp_model, sp_type;
    int vocab_size = 0;
};

// The tokenizer, its files checked before any text is read. char and a SentencePiece model to
// train are made from the text later (make_tokenizer).
Tokenizer check_tokenizer(const TextTokenizer& o) {
    if (o.kind != "byte" && o.kind != "char" && o.kind != "gpt2" && o.kind != "sentencepiece")
        throw UserError(strfmt("text: --tokenizer '%s' is unknown; use byte, char, gpt2 or sentencepiece", o.kind.c_str()));
    if (o.kind != "gpt2" && (!o.encoder.empty() || !o.merges.empty()))
        throw UserError("text: --encoder and --merges belong to --tokenizer gpt2");
    if (o.kind != "sentencepiece" && (!o.sp_model.empty() || o.vocab_size != 0))
        throw UserError("text: --sp-model and --vocab-size belong to --tokenizer sentencepiece");
    Tokenizer t;
    t.kind = o.kind;
    if (o.kind == "gpt2") {
        if (o.encoder.empty() || o.merges.empty())
            throw UserError("text: --tokenizer gpt2 needs GPT-2's files: --encoder encoder.json --merges vocab.bpe "
                            "(Hugging Face's vocab.json and merges.txt are the same files)");
        return Tokenizer::gpt2(o.encoder, o.merges);
    }
    if (o.kind != "sentencepiece") return t;
    if (!o.sp_model.empty() && o.vocab_size != 0)
        throw UserError("text: give --sp-model (a model of your own) or --vocab-size (train one here), not both");
    if (!o.sp_model.empty()) return Tokenizer::sentencepiece(SentencePieceModel::load(o.sp_model));
    if (o.vocab_size < 260 || o.vocab_size > 1000000)
        throw UserError(strfmt("text: --vocab-size %d: a SentencePiece model trained here needs 260 to 1000000 pieces "
                               "(its 256 byte pieces and more; 1024 to 32768 are usual)",
                               o.vocab_size));
    if (o.sp_type != "bpe" && o.sp_type != "unigram")
        throw UserError(strfmt("text: --sp-type '%s' is unknown; use bpe or unigram", o.sp_type.c_str()));
    return t;
}

// The tokenizer of `data` whose first `train_bytes` are the training text: char takes its
// characters from all of it; a SentencePiece model is trained on the training text alone, up to
// its last whole line, so the validation text stays unseen.
Tokenizer make_tokenizer(Tokenizer t, const TextTokenizer& o, const std::string& data, size_t train_bytes) {
    if (t.kind == "char") return Tokenizer::chars_of(data);
    if (t.kind != "sentencepiece" || t.sp) return t;
    const int threads = std::max(1, (int)std::thread::hardware_concurrency());
    return Tokenizer::sentencepiece(SentencePieceModel::train(data, train_bytes, o.vocab_size, o.sp_type, threads));
}

int text(int argc, char** argv) {
    std::vector<std::string> inputs;
    std::string out, vocab;
    TextTokenizer tt;
    double val_fraction;
    int shards;
    bool overwrite = false;
    po::options_description desc("dptrain-data text: token shards from text files", 100, 50);
    desc.add_options()("help,h", "print this help")(
        "input", po::value(&inputs)->multitoken()->composing(),
        "text file (UTF-8 for --tokenizer char and sentencepiece), directory (every file beneath it, hidden ones left "
        "out) or glob pattern (quoted: 'corpus/*.txt'); repeat it or give several: the files are read in order, each "
        "directory's and pattern's sorted by name, and joined with a newline after any file that lacks one (gpt2: "
        "each file is a document, followed by <|endoftext|>)")(
        "out", po::value(&out)->default_value("data/text"), "output directory")(
        "tokenizer", po::value(&tt.kind)->default_value("char"),
        "byte (256 ids) | char (the text's characters, in code-point order) | gpt2 (GPT-2's byte-level BPE, from "
        "--encoder and --merges) | sentencepiece (trained here at --vocab-size, or --sp-model)")(
        "encoder", po::value(&tt.encoder), "gpt2: GPT-2's encoder.json (or Hugging Face's vocab.json)")(
        "merges", po::value(&tt.merges), "gpt2: GPT-2's vocab.bpe (or Hugging Face's merges.txt)")(
        "vocab-size", po::value(&tt.vocab_size)->default_value(0),
        "sentencepiece: train a model of this many pieces on the training text")(
        "sp-type", po::value(&tt.sp_type)->default_value("bpe"), "sentencepiece: bpe | unigram")(
        "sp-model", po::value(&tt.sp_model), "sentencepiece: a model of your own (a .model file) instead")(
        "vocab", po::value(&vocab), "the older name of --tokenizer (byte or char)")(
        "val-fraction", po::value(&val_fraction)->default_value(0.1), "the text's tail kept for validation")(
        "shards", po::value(&shards)->default_value(1), "training shards (validation: 1)")(
        "overwrite", po::bool_switch(&overwrite), "replace the shards already in --out");
    if (parse_or_help(argc, argv, desc)) return 0;
    if (inputs.empty()) throw UserError("text: give the text with --input FILE, DIR or PATTERN");
    if (!vocab.empty()) tt.kind = vocab;
    Tokenizer tok = check_tokenizer(tt);
    if (!(val_fraction > 0 && val_fraction < 1) || shards < 1)
        throw UserError("text: --val-fraction must be in (0, 1) and --shards >= 1");
    const std::vector<std::string> files = text_files(inputs);
    // GPT-2's documents end in <|endoftext|> (as OpenWebText's do in nanoGPT); other tokenizers
    // join the files with newlines.
    const int eot = tok.kind == "gpt2" && files.size() > 1 ? tok.bpe->id_of("<|endoftext|>") : -1;
    std::vector<size_t> ends;
    const std::string data = read_texts(files, eot < 0, &ends);
    std::string source = files.size() == 1 ? files[0] : strfmt("%zu files: %s ... %s", files.size(), files.front().c_str(),
                                                               files.back().c_str());
    tok = make_tokenizer(tok, tt, data, (size_t)(data.size() * (1 - val_fraction)));
    std::vector<int> ids;
    if (eot < 0) ids = tok.encode(data);
    for (size_t f = 0, at = 0; eot >= 0 && f < ends.size(); at = ends[f++]) {
        tok.bpe->encode(data.substr(at, ends[f] - at), &ids);
        ids.push_back(eot);
    }
    const std::string joined = eot >= 0 ? strfmt(", each followed by <|endoftext|> (id %d)", eot) : "";
    size_t n_val = (size_t)(ids.size() * val_fraction), n_train = ids.size() - n_val;
    if (n_train < (size_t)shards * 2 || n_val < 2)
        throw UserError(strfmt("text: --input %s holds only %zu tokens: too little for %d shards and a validation split",
                               source.c_str(), ids.size(), shards));
    prepare_out(out, {"train", "val"}, overwrite);
    for (int s = 0; s < shards; ++s)
        write_tokens(strfmt("%s/train-%05d-of-%05d.h5", out.c_str(), s, shards), ids, n_train * s / shards,
                     n_train * (s + 1) / shards, tok, source);
    write_tokens(strfmt("%s/val-00000-of-00001.h5", out.c_str()), ids, n_train, ids.size(), tok, source);
    std::printf("dptrain-data text: %zu tokens from %s%s (%s vocabulary of %d) -> %zu training tokens in %d shard%s, "
                "%zu validation tokens, in %s\n",
                ids.size(), source.c_str(), joined.c_str(), tok.kind.c_str(), tok.vocab_size(), n_train, shards, shards == 1 ? "" : "s",
                n_val, out.c_str());
    return 0;
}

// ---- ingest: users' CSV / NumPy / HDF5 files -> shards ----

const char* const kIngestHelp = R"(
Inputs (--format auto tells them apart by their first bytes, then by the file extension):
  csv   --input data.csv [--label-column K] [--no-header]
        numeric columns, one of them the integer label (default: the last); a first line with a
        non-numeric field (or pandas' 0,1,2,... column names) is a header unless --no-header
  npy   --input features.npy --input labels.npy
        two files, features first: (N, D) or (N,) float/int, labels (N,) integer
  npz   --input data.npz [--features-dataset x --labels-dataset y]
        np.savez or np.savez_compressed; default names x or features, y or labels
  hdf5  --input data.h5 [--features-dataset /data/X --labels-dataset /data/y]
        any float or integer features, integer labels; default names /features, /labels
Several --input files (for npy: several pairs) are concatenated in the order given.

Output: --shards S equal train shards (sizes differ by at most one row) and one val shard with the
last --val-fraction of the samples, in input order; --split train|val sends every sample to S
shards of that split (e.g. a separate validation file: then give --num-classes to both runs).
Existing shards of the split(s) written stop the run unless --overwrite.

Under mpirun (mpirun -np 4 dptrain-data ingest ...) every rank reads the whole input, so all ranks
see the same data and the same errors; rank 0 prepares --out; shard i, counting the train shards
first and then val, is written by rank i % (number of ranks); rank 0 prints the summary.
)";

// Runs `step` on every rank and agrees on the outcome: when it threw anywhere, the lowest failing
// rank prints its one line and every rank returns false (the caller finalizes and exits 2), so a
// bad input ends the whole job cleanly instead of leaving ranks waiting in the next collective.
template <typename Fn>
bool agreed(Fn&& step) {
    std::string msg;
    bool ok = true;
    try {
        step();
    } catch (const po::error& e) {
        ok = false;
        msg = strfmt("%s; see %s ingest --help", e.what(), runnable("dptrain-data").c_str());
    } catch (const std::exception& e) {
        ok = false;
        msg = e.what();
    }
    MpiCommunicator world(MPI_COMM_WORLD);
    const int rank = world.rank(), size = world.size();
    int first = ok ? INT_MAX : rank;
    world.allreduce(&first, 1, ReduceOp::min);
    if (first == INT_MAX) return true;
    if (rank == first) {
        // Messages quote bytes of the user's file; a control character there must not break the
        // one-line promise (or the terminal).
        for (char& c : msg)
            if ((unsigned char)c < 0x20 || c == 0x7f) c = '?';
        std::string who = size > 1 ? strfmt(" (%s)", process_identity().c_str()) : "";
        std::fprintf(stderr, "dptrain-data: error: %s%s\n", msg.c_str(), who.c_str());
        std::fflush(stderr);
    }
    return false;
}

std::string join(const std::vector<std::string>& v) {
    std::string s;
    for (const std::string& x : v) s += (s.empty() ? "" : " ") + x;
    return s;
}

// The MPI walk-through (every rank runs the same steps; each `agreed` is a collective):
//   1. every rank parses the options;
//   2. every rank reads and checks the whole input and plans the shards: the readers are
//      deterministic, so all ranks hold the same table and plan (or fail alike);
//   3. rank 0 prepares --out (creates it; refuses or removes old shards);
//   4. rank r writes plan[i] for every i with i % size == r (train shards, then val);
//   5. the bytes written are summed on rank 0, which prints the summary.
// Reading on every rank costs each rank the input's memory but needs no scatter protocol; the
// shards are what takes the time, and those are split.
int ingest_cmd(int argc, char** argv) {
    mpi_start(nullptr, nullptr);
    MpiCommunicator world(MPI_COMM_WORLD);
    const int rank = world.rank(), size = world.size();
    auto finish = [](int code) {
        mpi_finish();
        return code;
    };

    std::vector<std::string> inputs;
    std::string out, format, split, features_name, labels_name;
    int shards = 1, label_column = -1, num_classes = 0;
    double val_fraction = 0.1;
    bool no_header = false, overwrite = false, help = false;
    po::options_description desc("dptrain-data ingest: dataset shards from CSV, NumPy (.npy, .npz) or HDF5 files", 100, 50);
    desc.add_options()("help,h", "print this help")(
        "input", po::value(&inputs), "input file; repeat for several (npy: --input features.npy --input labels.npy)")(
        "out", po::value(&out), "output directory (created)")(
        "format", po::value(&format)->default_value("auto"), "auto | csv | npy | npz | hdf5")(
        "shards", po::value(&shards)->default_value(1), "shards per split written (val: 1 unless --split val)")(
        "val-fraction", po::value(&val_fraction)->default_value(0.1, "0.1"),
        "the last share of the samples (input order) that becomes val-00000-of-00001.h5; 0: none")(
        "split", po::value(&split), "train | val: every sample to that split (default: both, by --val-fraction)")(
        "features-dataset", po::value(&features_name), "hdf5/npz: features array (default /features; npz: x or features)")(
        "labels-dataset", po::value(&labels_name), "hdf5/npz: labels array (default /labels; npz: y or labels)")(
        "label-column", po::value(&label_column)->default_value(-1), "csv: 0-based index of the label column; -1: last")(
        "no-header", po::bool_switch(&no_header), "csv: the first line is data (default: a header if it is not numeric)")(
        "num-classes", po::value(&num_classes)->default_value(0), "number of classes (default: max label + 1)")(
        "overwrite", po::bool_switch(&overwrite), "replace the shards of the written split(s) already in --out");

    ingest::Table table;
    ingest::Format used = ingest::Format::automatic;
    std::vector<ingest::ShardSpec> plan;
    int K = 0;
    // 1.
    if (!agreed([&] {
            help = parse_or_help(argc, argv, desc, kIngestHelp, rank == 0);
            if (help) return;
            if (out.empty()) throw UserError("ingest: give the output directory with --out DIR");
            if (inputs.empty())
                throw UserError("ingest: give the data with --input FILE (see " + runnable("dptrain-data") +
                                " ingest --help)");
        }))
        return finish(2);
    if (help) return finish(0);
    // 2.
    if (!agreed([&] {
            ingest::Options o;
            o.format = ingest::parse_format(format);
            o.features_name = features_name;
            o.labels_name = labels_name;
            o.label_column = label_column;
            o.no_header = no_header;
            table = ingest::read_inputs(inputs, o, &used);
            // Labels live in the second file of an .npy pair; elsewhere name the (first) input.
            std::string what = used == ingest::Format::npy ? inputs[1] : inputs[0];
            if (inputs.size() > (used == ingest::Format::npy ? 2u : 1u)) what += " (and the inputs after it)";
            K = ingest::resolve_classes(table, num_classes, what);
            plan = ingest::plan_shards(table.n, shards, val_fraction, split);
        }))
        return finish(2);
    // 3.
    if (!agreed([&] {
            std::vector<std::string> splits;
            for (const auto& sp : plan)
                if (std::find(splits.begin(), splits.end(), sp.split) == splits.end()) splits.push_back(sp.split);
            if (rank == 0) prepare_out(out, splits, overwrite);
        }))
        return finish(2);
    // 4.
    uint64_t bytes = 0;
    std::string generator = strfmt("dptrain-data ingest (%s: %s)", ingest::format_name(used), join(inputs).c_str());
    if (!agreed([&] {
            make_dirs(out);  // a no-op on rank 0's filesystem; needed where ranks' nodes do not share it
            for (size_t i = rank; i < plan.size(); i += size) {
                const ingest::ShardSpec& sp = plan[i];
                bytes += write_tabular_shard(shard_path(out, sp.split, sp.index, sp.of), &table.x[(size_t)sp.first * table.d],
                                             &table.y[sp.first], sp.rows, table.d, K, generator);
            }
        }))
        return finish(2);
    // 5.
    unsigned long total = bytes;
    world.allreduce(&total, 1, ReduceOp::sum);
    if (rank == 0) {
        long n_train = 0, n_val = 0;
        int s_train = 0, s_val = 0;
        for (const auto& sp : plan) {
            bool train = sp.split == "train";
            (train ? n_train : n_val) += sp.rows;
            (train ? s_train : s_val) += 1;
        }
        std::printf("dptrain-data ingest: %ld samples (%ld train, %ld val), %d features, %d classes, from %s %s -> %s: "
                    "%d train + %d val shards, %llu bytes (%s) written by %d rank%s\n",
                    table.n, n_train, n_val, table.d, K, ingest::format_name(used), join(inputs).c_str(), out.c_str(),
                    s_train, s_val, (unsigned long long)total,
                    total < 1000000 ? strfmt("%.1f kB", total / 1e3).c_str() : strfmt("%.1f MB", total / 1e6).c_str(),
                    size, size == 1 ? "" : "s");
    }
    return finish(0);
}

// ---- tokens: ids tokenized elsewhere (nanoGPT, llm.c, .npy) -> token shards ----

const char* const kTokensHelp = R"(
Inputs (--format auto tells them apart by their first bytes):
  nanogpt  raw little-endian uint16 ids, as nanoGPT's prepare.py writes train.bin and val.bin
  llmc     llm.c's .bin: a header of 256 int32 (magic 20240520, version 1 for uint16 ids or 2 for
           uint32, the token count), then the ids; the count must match the file's size
  npy      a NumPy array of integer ids, shape (N,)
  hdf5     a 1-D integer dataset of an HDF5 file: --dataset NAME (default /tokens)
Several --input files are concatenated in the order given. Every id is checked below
--vocab-size (GPT-2's BPE: 50257); the first one that is not is named with its file and
position (exit 2). The shards hold tokenizer "ids": training needs no text, and `dptrain
generate` takes and prints ids. Ids made with GPT-2's BPE (nanoGPT's and llm.c's data) can carry
it instead: --encoder encoder.json --merges vocab.bpe (the vocabulary size is then theirs), and
the eval lines give bits per byte, `generate` and `serve` take and print text.
Output: --shards S training shards and one validation shard with the last --val-fraction of the
ids; --split train|val sends all of them to that split (nanoGPT's train.bin and val.bin: two runs).
)";

int tokens_cmd(int argc, char** argv) {
    std::vector<std::string> inputs;
    std::string out, format, split, dataset, encoder, merges;
    long vocab_size = 0;
    double val_fraction;
    int shards;
    bool overwrite = false;
    po::options_description desc("dptrain-data tokens: token shards from ids tokenized elsewhere", 100, 50);
    desc.add_options()("help,h", "print this help")("input", po::value(&inputs), "token file; repeat for several")(
        "out", po::value(&out)->default_value(""), "output directory")(
        "format", po::value(&format)->default_value("auto"), "auto | nanogpt | llmc | npy | hdf5")(
        "dataset", po::value(&dataset)->default_value("/tokens"), "hdf5: the dataset of ids")(
        "vocab-size", po::value(&vocab_size)->default_value(0), "the tokenizer's vocabulary size (GPT-2: 50257)")(
        "encoder", po::value(&encoder), "GPT-2's encoder.json (or vocab.json): the ids are GPT-2's BPE")(
        "merges", po::value(&merges), "GPT-2's vocab.bpe (or merges.txt), with --encoder")(
        "split", po::value(&split)->default_value(""), "train | val: every id to that split (default: both)")(
        "val-fraction", po::value(&val_fraction)->default_value(0.1), "the ids' tail kept for validation")(
        "shards", po::value(&shards)->default_value(1), "shards of the training split")(
        "overwrite", po::bool_switch(&overwrite), "replace the shards already in --out");
    if (parse_or_help(argc, argv, desc, kTokensHelp)) return 0;
    if (inputs.empty()) throw UserError("tokens: give the token files with --input FILE");
    if (out.empty()) throw UserError("tokens: give the output directory with --out DIR");
    Tokenizer tok = Tokenizer::from("ids", "2");
    if (!encoder.empty() || !merges.empty()) {
        if (encoder.empty() || merges.empty())
            throw UserError("tokens: GPT-2's BPE needs both files: --encoder encoder.json --merges vocab.bpe");
        tok = Tokenizer::gpt2(encoder, merges);
        if (vocab_size != 0 && vocab_size != tok.vocab_size())
            throw UserError(strfmt("tokens: --vocab-size %ld, but --encoder %s holds %d tokens; leave --vocab-size out",
                                   vocab_size, encoder.c_str(), tok.vocab_size()));
        vocab_size = tok.vocab_size();
    }
    if (vocab_size < 2 || vocab_size > INT32_MAX)
        throw UserError("tokens: give the tokenizer's vocabulary size with --vocab-size V (GPT-2's BPE: 50257), or "
                        "its files with --encoder and --merges");
    if (tok.kind == "ids") tok = Tokenizer::from("ids", std::to_string(vocab_size));
    if (!split.empty() && split != "train" && split != "val")
        throw UserError(strfmt("tokens: --split '%s' is unknown; use train or val", split.c_str()));
    if ((split.empty() && !(val_fraction > 0 && val_fraction < 1)) || shards < 1)
        throw UserError("tokens: --val-fraction must be in (0, 1) and --shards >= 1");
    const token_files::Format f = token_files::parse_format(format);
    std::vector<int> ids;
    std::string used;
    for (const std::string& in : inputs) {
        token_files::Format got = f;
        for (uint32_t v : token_files::read(in, f, vocab_size, &got, dataset)) ids.push_back((int)v);
        used += std::string(used.empty() ? "" : ", ") + token_files::format_name(got);
    }
    const size_t n_val = split == "val" ? ids.size() : split == "train" ? 0 : (size_t)(ids.size() * val_fraction);
    const size_t n_train = ids.size() - n_val;
    const int train_shards = n_train > 0 ? shards : 0;
    if ((n_train > 0 && n_train < (size_t)shards * 2) || (n_val > 0 && n_val < 2) || ids.size() < 2)
        throw UserError(strfmt("tokens: %zu ids: too few for %d shards%s", ids.size(), shards,
                               split.empty() ? " and a validation split" : ""));
    std::vector<std::string> splits;
    if (n_train > 0) splits.push_back("train");
    if (n_val > 0) splits.push_back("val");
    prepare_out(out, splits, overwrite);
    const std::string source = join(inputs);
    for (int sh = 0; sh < train_shards; ++sh)
        write_tokens(strfmt("%s/train-%05d-of-%05d.h5", out.c_str(), sh, train_shards), ids, n_train * sh / train_shards,
                     n_train * (sh + 1) / train_shards, tok, source);
    if (n_val > 0) write_tokens(strfmt("%s/val-00000-of-00001.h5", out.c_str()), ids, n_train, ids.size(), tok, source);
    std::printf("dptrain-data tokens: %zu ids (%s vocabulary %ld) from %s (%s) -> %zu training ids in %d shard%s, %zu "
                "validation ids, in %s\n",
                ids.size(), tok.kind.c_str(), vocab_size, source.c_str(), used.c_str(), n_train, train_shards, train_shards == 1 ? "" : "s",
                n_val, out.c_str());
    return 0;
}

} // namespace

int main(int argc, char** argv) {
    std::string cmd = argc > 1 ? argv[1] : "";
    try {
        if (cmd == "synth") return synth(argc - 1, argv + 1);
        if (cmd == "text") return text(argc - 1, argv + 1);
        if (cmd == "ingest") return ingest_cmd(argc - 1, argv + 1);
        if (cmd == "verify") return verify_cmd(argc - 1, argv + 1);
        if (cmd == "tokens") return tokens_cmd(argc - 1, argv + 1);
        if (cmd == "--version") {
            std::printf("dptrain-data %s\n", DPTRAIN_VERSION);
            return 0;
        }
        if (cmd == "-h" || cmd == "--help") {
            std::printf("usage: dptrain-data synth --out DIR [options]   (dptrain-data synth --help)\n"
                        "       dptrain-data text --input FILE|DIR|PATTERN ... --out DIR [options]   (dptrain-data text --help)\n"
                        "       dptrain-data ingest --input FILE [--input FILE ...] --out DIR [options]   "
                        "(dptrain-data ingest --help)\n"
                        "       dptrain-data tokens --input FILE --vocab-size V --out DIR [options]   "
                        "(dptrain-data tokens --help)\n"
                        "       dptrain-data verify DIR [--update-sums]   (dptrain-data verify --help)\n");
            return 0;
        }
        std::fprintf(stderr, "dptrain-data: error: unknown command '%s'; use %s synth|text|tokens|ingest|verify --help\n", cmd.c_str(),
                     runnable("dptrain-data").c_str());
        return 2;
    } catch (const po::error& e) {
        std::fprintf(stderr, "dptrain-data: error: %s; see %s %s --help\n", e.what(), runnable("dptrain-data").c_str(),
                     cmd.c_str());
        return 2;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "dptrain-data: error: %s\n", e.what());
        return 2;
    }
}
