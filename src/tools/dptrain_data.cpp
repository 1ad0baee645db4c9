// dptrain-data: makes datasets in dptrain's shard format (data/README.md): synth, text, ingest
// (the one subcommand under MPI), tokens, verify; usage in each --help.
// Not for: reading shards (shards.h, tokens.h).
#include "dptrain/core/check.h"
#include "dptrain/comm/communicator.h"
#include "dptrain/config/argv.h"
#include "dptrain/core/error.h"
#include "dptrain/data/h5.h"
#include "dptrain/tools/data_commands.h"
#include "dptrain/tools/ingest.h"
#include "dptrain/core/rng.h"
#include "dptrain/data/stage.h"
#include "dptrain/data/verify.h"
#include "dptrain/core/files.h"

#include <boost/program_options.hpp>
#include <mpi.h>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <vector>

namespace po = boost::program_options;
using namespace dptrain;

namespace {

// synth's labels: argmax of a fixed random D -> H tanh -> K network, plus a little noise.
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

// A pure function of (seed, stream, index), so the data do not depend on the shard count.
void make_sample(const Teacher& t, uint64_t seed, int stream, long index, float noise, float* x, int* y) {
    Rng r(stream_seed(seed ^ (0x5A5A5A5Aull * (stream + 1)), (uint64_t)index));
    for (int i = 0; i < t.D; ++i) x[i] = r.normal();
    *y = t.label(x);
    if (r.uniform() < noise) *y = (int)r.below((uint64_t)t.K);
}

std::string shard_path(const std::string& dir, const std::string& split, int index, int of) {
    return strfmt("%s/%s-%05d-of-%05d.h5", dir.c_str(), split.c_str(), index, of);
}

// synth and ingest both write through here (format: data/README.md). Returns the file's size.
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
    po::store(po::command_line_parser(argc, argv).options(all).positional(pos).style(kWholeOptionNames).run(), vm);
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
    complete_sums(out, {"train", "val"});
    std::printf("dptrain-data synth: %ld training samples in %d shards, %ld validation samples, %d features, %d classes "
                "-> %s (%.1f MB)\n",
                train_n, shards, val_n, D, K, out.c_str(), (train_n + val_n) * (D + 1) * 4.0 / 1e6);
    return 0;
}

// ---- ingest: users' CSV / NumPy / HDF5 files -> shards ----

void ingest_summary(const ingest::Table& table, int classes, const std::vector<ingest::ShardSpec>& plan,
                    const std::string& from, const std::string& out, unsigned long bytes, int ranks, bool both_splits) {
    long n_train = 0, n_val = 0;
    int s_train = 0, s_val = 0;
    for (const auto& sp : plan) {
        bool train = sp.split == "train";
        (train ? n_train : n_val) += sp.rows;
        (train ? s_train : s_val) += 1;
    }
    std::printf("dptrain-data ingest: %ld samples (%ld train, %ld val), %d features, %d classes, from %s -> %s: %d train "
                "+ %d val shards, %llu bytes (%s) written by %d rank%s\n",
                table.n, n_train, n_val, table.d, classes, from.c_str(), out.c_str(), s_train, s_val,
                (unsigned long long)bytes,
                bytes < 1000000 ? strfmt("%.1f kB", bytes / 1e3).c_str() : strfmt("%.1f MB", bytes / 1e6).c_str(), ranks,
                ranks == 1 ? "" : "s");
    for (const std::string& note : table.notes) std::printf("dptrain-data ingest: note: %s\n", note.c_str());
    if (s_val == 0 && both_splits)
        std::printf("dptrain-data ingest: note: no validation split (--val-fraction 0); dptrain needs one: write it "
                    "into %s with --split val\n",
                    out.c_str());
}

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
Existing shards of the split(s) written stop the run unless --overwrite. A SHA256SUMS in --out
keeps its other lines and gets the new shards' (`dptrain-data verify` still checks the rest).

Under mpirun (mpirun -np 4 dptrain-data ingest ...) every rank reads the whole input, so all ranks
see the same data and the same errors; rank 0 prepares --out; shard i, counting the train shards
first and then val, is written by rank i % (number of ranks); rank 0 prints the summary.
)";

// MPI walk-through (each `agreed` is a collective on every rank):
//   1. every rank parses the options;
//   2. every rank reads the whole input and plans: deterministic, so all agree (or fail alike);
//   3. rank 0 prepares --out (refuses or removes old shards and their sums);
//   4. rank r writes plan[i] for i % size == r; rank 0 then adds them to SHA256SUMS;
//   5. rank 0 sums the bytes written and prints the summary.
// Reading everywhere costs memory but needs no scatter; the writing is what takes time.
int ingest_cmd(int argc, char** argv) {
    const MpiScope mpi;
    MpiCommunicator world(MPI_COMM_WORLD);
    const int rank = world.rank(), size = world.size();

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
        "the last share of the samples (input order) that becomes val-00000-of-00001.h5; 0: none (then write one "
        "with --split val: dptrain needs it)")(
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
    if (!agreed("ingest", [&] {
            help = parse_or_help(argc, argv, desc, kIngestHelp, rank == 0);
            if (help) return;
            if (out.empty()) throw UserError("ingest: give the output directory with --out DIR");
            if (inputs.empty())
                throw UserError("ingest: give the data with --input FILE (see " + runnable("dptrain-data") +
                                " ingest --help)");
        }))
        return 2;
    if (help) return 0;
    // 2.
    if (!agreed("ingest", [&] {
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
        return 2;
    // 3.
    std::vector<std::string> splits;
    for (const auto& sp : plan)
        if (std::find(splits.begin(), splits.end(), sp.split) == splits.end()) splits.push_back(sp.split);
    if (!agreed("ingest", [&] {
            if (rank == 0) prepare_out(out, splits, overwrite);
        }))
        return 2;
    // 4.
    uint64_t bytes = 0;
    std::string generator = strfmt("dptrain-data ingest (%s: %s)", ingest::format_name(used), join(inputs).c_str());
    if (!agreed("ingest", [&] {
            make_directories(out, "--out");  // for nodes that do not share rank 0's filesystem
            for (size_t i = rank; i < plan.size(); i += size) {
                const ingest::ShardSpec& sp = plan[i];
                bytes += write_tabular_shard(shard_path(out, sp.split, sp.index, sp.of), &table.x[(size_t)sp.first * table.d],
                                             &table.y[sp.first], sp.rows, table.d, K, generator);
            }
        }))
        return 2;
    if (!agreed("ingest", [&] {
            if (rank == 0) complete_sums(out, splits);
        }))
        return 2;
    // 5.
    unsigned long total = bytes;
    world.allreduce(&total, 1, ReduceOp::sum);
    if (rank == 0) {
        const std::string from = strfmt("%s %s", ingest::format_name(used), join(inputs).c_str());
        ingest_summary(table, K, plan, from, out, total, size, split.empty());
    }
    return 0;
}

} // namespace

int main(int argc, char** argv) {
    std::string cmd = argc > 1 ? argv[1] : "";
    try {
        if (cmd == "synth") return synth(argc - 1, argv + 1);
        if (cmd == "text") return text_cmd(argc - 1, argv + 1);
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
