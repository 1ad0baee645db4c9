// dptrain-data text and tokens: token shards from text (through a tokenizer) or from ids made
// elsewhere. Not for: reading token shards (data/tokens.h) or the tokenizers themselves.
#include "dptrain/tools/data_commands.h"

#include "dptrain/comm/communicator.h"
#include "dptrain/core/check.h"
#include "dptrain/core/error.h"
#include "dptrain/core/files.h"
#include "dptrain/data/h5.h"
#include "dptrain/data/tokens.h"
#include "dptrain/tools/text_files.h"
#include "dptrain/tools/token_files.h"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <mpi.h>
#include <thread>

namespace dptrain {

namespace po = boost::program_options;

namespace {

template <typename Id>  // int (text's ids) or uint32_t (ids read from token files)
void write_tokens(const std::string& path, const std::vector<Id>& ids, size_t begin, size_t end, const Tokenizer& tok,
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
// characters from all of it; a SentencePiece model is trained on the training text alone, so the
// validation text stays unseen.
Tokenizer make_tokenizer(Tokenizer t, const TextTokenizer& o, const std::string& data, size_t train_bytes) {
    if (t.kind == "char") return Tokenizer::chars_of(data);
    if (t.kind != "sentencepiece" || t.sp) return t;
    const int threads = std::max(1, (int)std::thread::hardware_concurrency());
    return Tokenizer::sentencepiece(SentencePieceModel::train(data, train_bytes, o.vocab_size, o.sp_type, threads));
}

// Where the text may be cut into `parts` pieces that encode alone to the ids the whole would
// give: at file ends when each file is a document (<|endoftext|> after it); else after a newline,
// and for gpt2 only a newline between two visible ASCII characters (there GPT-2's pre-tokenizer
// always splits: a longer run of white space would group differently when cut); a SentencePiece
// model that does not encode line by line is not cut. Returns parts + 1 offsets.
std::vector<size_t> chunk_cuts(const std::string& data, const std::vector<size_t>& ends, bool per_file,
                               const Tokenizer& tok, int parts) {
    auto visible = [&](size_t i) { return data[i] > ' ' && data[i] < 0x7F; };
    const bool gpt2 = tok.kind == "gpt2";
    const bool whole = tok.kind == "sentencepiece" && !tok.sp->lines_alone();
    std::vector<size_t> cuts((size_t)parts + 1, data.size());
    cuts[0] = 0;
    for (int r = 1; r < parts; ++r) {
        size_t p = std::max(cuts[(size_t)r - 1], data.size() / parts * r);
        if (whole) p = data.size();
        else if (per_file) p = *std::lower_bound(ends.begin(), ends.end(), p);
        else
            while (p < data.size() && !(p >= 2 && data[p - 1] == '\n' && (!gpt2 || (visible(p - 2) && visible(p))))) ++p;
        cuts[(size_t)r] = p;
    }
    return cuts;
}

// The ids of data[begin, end): each file in it followed by `eot` when eot >= 0.
void encode_range(const Tokenizer& tok, const std::string& data, size_t begin, size_t end,
                  const std::vector<size_t>& ends, int eot, std::vector<int>* ids) {
    if (eot < 0) {
        if (end > begin) *ids = tok.encode(data.substr(begin, end - begin));
        return;
    }
    // A file belongs to the chunk its end falls in; an empty first file (its end 0) to the first.
    for (size_t at = begin, f = 0; f < ends.size(); ++f)
        if ((ends[f] > begin || begin == 0) && ends[f] <= end) {
            tok.bpe->encode(data.substr(at, ends[f] - at), ids);
            ids->push_back(eot);
            at = ends[f];
        }
}

// Every rank's ids, in rank order, on every rank. Collective; `total` is their count.
std::vector<int> gather_ids(const std::vector<int>& mine, long* total) {
    MpiCommunicator world(MPI_COMM_WORLD);
    std::vector<long> counts((size_t)world.size());
    const long n = (long)mine.size();
    world.allgather(&n, sizeof n, counts.data());
    *total = 0;
    for (long c : counts) *total += c;
    if (*total > INT_MAX) return {};  // the caller refuses
    std::vector<int> all((size_t)*total), cnt, at;
    for (long c : counts) at.push_back(cnt.empty() ? 0 : at.back() + cnt.back()), cnt.push_back((int)c);
    MPI_CHECK(MPI_Allgatherv(mine.data(), (int)n, MPI_INT, all.data(), cnt.data(), at.data(), MPI_INT, MPI_COMM_WORLD));
    return all;
}

// Rank 0's trained SentencePiece model to every rank (collective).
void share_model(Tokenizer* tok) {
    MpiCommunicator world(MPI_COMM_WORLD);
    std::string model = world.rank() == 0 && tok->sp ? tok->sp->bytes() : "";
    long n = (long)model.size();
    MPI_CHECK(MPI_Bcast(&n, 1, MPI_LONG, 0, MPI_COMM_WORLD));
    model.resize((size_t)n);
    MPI_CHECK(MPI_Bcast(model.data(), (int)n, MPI_BYTE, 0, MPI_COMM_WORLD));
    if (world.rank() != 0) *tok = Tokenizer::sentencepiece(SentencePieceModel::from_bytes(model, "rank 0's model"));
}

// text's options and where they go.
struct TextArgs {
    std::vector<std::string> inputs;
    std::string out, vocab;
    TextTokenizer tt;
    double val_fraction = 0.1;
    int shards = 1;
    bool overwrite = false;
};

po::options_description text_options(TextArgs* a) {
    po::options_description desc("dptrain-data text: token shards from text files", 100, 50);
    desc.add_options()("help,h", "print this help")(
        "input", po::value(&a->inputs)->multitoken()->composing(),
        "text file (UTF-8 for --tokenizer char and sentencepiece), directory (every file beneath it, hidden ones left "
        "out) or glob pattern (quoted: 'corpus/*.txt'); repeat it or give several: the files are read in order, each "
        "directory's and pattern's sorted by name, and joined with a newline after any file that lacks one (gpt2: "
        "each file is a document, followed by <|endoftext|>)")(
        "out", po::value(&a->out)->default_value("data/text"), "output directory")(
        "tokenizer", po::value(&a->tt.kind)->default_value("char"),
        "byte (256 ids) | char (the text's characters, in code-point order) | gpt2 (GPT-2's byte-level BPE, from "
        "--encoder and --merges) | sentencepiece (trained here at --vocab-size, or --sp-model)")(
        "encoder", po::value(&a->tt.encoder), "gpt2: GPT-2's encoder.json (or Hugging Face's vocab.json)")(
        "merges", po::value(&a->tt.merges), "gpt2: GPT-2's vocab.bpe (or Hugging Face's merges.txt)")(
        "vocab-size", po::value(&a->tt.vocab_size)->default_value(0),
        "sentencepiece: train a model of this many pieces on the training text")(
        "sp-type", po::value(&a->tt.sp_type)->default_value("bpe"), "sentencepiece: bpe | unigram")(
        "sp-model", po::value(&a->tt.sp_model), "sentencepiece: a model of your own (a .model file) instead")(
        "vocab", po::value(&a->vocab), "the older name of --tokenizer (byte or char)")(
        "val-fraction", po::value(&a->val_fraction)->default_value(0.1), "the text's tail kept for validation")(
        "shards", po::value(&a->shards)->default_value(1), "training shards (validation: 1)")(
        "overwrite", po::bool_switch(&a->overwrite), "replace the shards already in --out");
    return desc;
}

} // namespace

// The MPI walk-through (every rank runs the same steps; each `agreed` is a collective):
//   1. every rank parses the options, checks the tokenizer's files and reads all the text;
//   2. the tokenizer: char from the text on every rank; a SentencePiece model to train is trained
//      by rank 0 and sent to the others;
//   3. rank r encodes piece r of the text (chunk_cuts: pieces that encode alone to the same ids);
//      every rank gathers all the ids;
//   4. rank 0 prepares --out; shard i (the train shards, then val) is written by rank i % ranks;
//      rank 0 prints the summary.
// Without mpirun it is one rank doing all of it.
int text_cmd(int argc, char** argv) {
    const MpiScope mpi;
    MpiCommunicator world(MPI_COMM_WORLD);
    const int rank = world.rank(), size = world.size();
    TextArgs a;
    const po::options_description desc = text_options(&a);
    bool help = false;
    Tokenizer tok;
    std::vector<std::string> files;
    std::vector<size_t> ends;
    std::string data, source;
    int eot = -1;
    // 1.
    if (!agreed("text", [&] {
            help = parse_or_help(argc, argv, desc, "", rank == 0);
            if (help) return;
            if (a.inputs.empty()) throw UserError("text: give the text with --input FILE, DIR or PATTERN");
            if (!a.vocab.empty()) a.tt.kind = a.vocab;
            tok = check_tokenizer(a.tt);
            if (!(a.val_fraction > 0 && a.val_fraction < 1) || a.shards < 1)
                throw UserError("text: --val-fraction must be in (0, 1) and --shards >= 1");
            files = text_files(a.inputs);
            // GPT-2's documents end in <|endoftext|> (as OpenWebText's do in nanoGPT); other
            // tokenizers join the files with newlines.
            eot = tok.kind == "gpt2" && files.size() > 1 ? tok.bpe->id_of("<|endoftext|>") : -1;
            data = read_texts(files, eot < 0, &ends);
            if (tok.kind == "char" || tok.kind == "sentencepiece") check_utf8(files, data, ends, tok.kind);
            source = files.size() == 1 ? files[0]
                                       : strfmt("%zu files: %s ... %s", files.size(), files.front().c_str(),
                                                files.back().c_str());
        }))
        return 2;
    if (help) return 0;
    // 2.
    const bool train_sp = tok.kind == "sentencepiece" && !tok.sp;
    if (!agreed("text", [&] {
            if (rank == 0 || !train_sp)
                tok = make_tokenizer(tok, a.tt, data, (size_t)(data.size() * (1 - a.val_fraction)));
        }))
        return 2;
    if (train_sp) share_model(&tok);
    // 3.
    std::vector<int> mine;
    if (!agreed("text", [&] {
            const std::vector<size_t> cuts = chunk_cuts(data, ends, eot >= 0, tok, size);
            encode_range(tok, data, cuts[(size_t)rank], cuts[(size_t)rank + 1], ends, eot, &mine);
        }))
        return 2;
    long total = 0;
    const std::vector<int> ids = gather_ids(mine, &total);
    // 4.
    const size_t n_val = (size_t)(total * a.val_fraction), n_train = (size_t)total - n_val;
    if (!agreed("text", [&] {
            if (total > INT_MAX)
                throw UserError(strfmt("text: %ld tokens, more than one run takes (2^31); make several --out sets of "
                                       "fewer files and give dptrain their shards together",
                                       total));
            if (n_train < (size_t)a.shards * 2 || n_val < 2)
                throw UserError(strfmt("text: --input %s holds only %ld tokens: too little for %d shards and a "
                                       "validation split",
                                       source.c_str(), total, a.shards));
            if (rank == 0) prepare_out(a.out, {"train", "val"}, a.overwrite);
        }))
        return 2;
    if (!agreed("text", [&] {
            const char* dir = a.out.c_str();
            make_directories(a.out, "--out");  // a no-op on rank 0's filesystem; needed where nodes do not share it
            for (int s = rank; s < a.shards; s += size)
                write_tokens(strfmt("%s/train-%05d-of-%05d.h5", dir, s, a.shards), ids, n_train * s / a.shards,
                             n_train * (s + 1) / a.shards, tok, source);
            if (a.shards % size == rank)
                write_tokens(strfmt("%s/val-00000-of-00001.h5", dir), ids, n_train, ids.size(), tok, source);
        }))
        return 2;
    if (!agreed("text", [&] {
            if (rank == 0) complete_sums(a.out, {"train", "val"});
        }))
        return 2;
    const std::string joined = eot >= 0 ? strfmt(", each followed by <|endoftext|> (id %d)", eot) : "";
    if (rank == 0)
        std::printf("dptrain-data text: %ld tokens from %s%s (%s vocabulary of %d) -> %zu training tokens in %d shard%s, "
                    "%zu validation tokens, in %s (%d rank%s)\n",
                    total, source.c_str(), joined.c_str(), tok.kind.c_str(), tok.vocab_size(), n_train, a.shards,
                    a.shards == 1 ? "" : "s", n_val, a.out.c_str(), size, size == 1 ? "" : "s");
    return 0;
}

// ---- tokens: ids tokenized elsewhere (nanoGPT, llm.c, .npy) -> token shards ----

namespace {

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
Under mpirun every rank reads all the files and the ranks write the shards in turn.
)";

// The tokenizer of ids made elsewhere: GPT-2's BPE from its files, or bare ids of vocab_size
// (which GPT-2's files set when it is 0).
Tokenizer ids_tokenizer(const std::string& encoder, const std::string& merges, long* vocab_size) {
    if (!encoder.empty() || !merges.empty()) {
        if (encoder.empty() || merges.empty())
            throw UserError("tokens: GPT-2's BPE needs both files: --encoder encoder.json --merges vocab.bpe");
        Tokenizer tok = Tokenizer::gpt2(encoder, merges);
        if (*vocab_size != 0 && *vocab_size != tok.vocab_size())
            throw UserError(strfmt("tokens: --vocab-size %ld, but --encoder %s holds %d tokens; leave --vocab-size out",
                                   *vocab_size, encoder.c_str(), tok.vocab_size()));
        *vocab_size = tok.vocab_size();
        return tok;
    }
    if (*vocab_size < 2 || *vocab_size > INT32_MAX)
        throw UserError("tokens: give the tokenizer's vocabulary size with --vocab-size V (GPT-2's BPE: 50257), or "
                        "its files with --encoder and --merges");
    return Tokenizer::from("ids", std::to_string(*vocab_size));
}

} // namespace

// Under mpirun as ingest: every rank reads and checks all the files (the readers are
// deterministic, so all hold the same ids or fail alike), rank 0 prepares --out, and shard i
// (the train shards, then val) is written by rank i % ranks.
int tokens_cmd(int argc, char** argv) {
    const MpiScope mpi;
    MpiCommunicator world(MPI_COMM_WORLD);
    const int rank = world.rank(), size = world.size();
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
    bool help = false;
    Tokenizer tok;
    std::vector<uint32_t> ids;  // 4 bytes an id, the only copy once read (it was 3: 6.6x a .bin's size)
    std::string used;
    size_t n_val = 0, n_train = 0;
    if (!agreed("tokens", [&] {
            help = parse_or_help(argc, argv, desc, kTokensHelp, rank == 0);
            if (help) return;
            if (inputs.empty()) throw UserError("tokens: give the token files with --input FILE");
            if (out.empty()) throw UserError("tokens: give the output directory with --out DIR");
            tok = ids_tokenizer(encoder, merges, &vocab_size);
            if (!split.empty() && split != "train" && split != "val")
                throw UserError(strfmt("tokens: --split '%s' is unknown; use train or val", split.c_str()));
            if ((split.empty() && !(val_fraction > 0 && val_fraction < 1)) || shards < 1)
                throw UserError("tokens: --val-fraction must be in (0, 1) and --shards >= 1");
            const token_files::Format f = token_files::parse_format(format);
            for (const std::string& in : inputs) {
                token_files::Format got = f;
                std::vector<uint32_t> part = token_files::read(in, f, vocab_size, &got, dataset);
                if (ids.empty()) ids = std::move(part);  // one file, the usual case: no copy
                else ids.insert(ids.end(), part.begin(), part.end());
                used += std::string(used.empty() ? "" : ", ") + token_files::format_name(got);
            }
            n_val = split == "val" ? ids.size() : split == "train" ? 0 : (size_t)(ids.size() * val_fraction);
            n_train = ids.size() - n_val;
            if ((n_train > 0 && n_train < (size_t)shards * 2) || (n_val > 0 && n_val < 2) || ids.size() < 2)
                throw UserError(strfmt("tokens: %zu ids in %s: too few for %s", ids.size(), inputs.size() == 1 ? inputs[0].c_str() : "the inputs",
                                       split == "val" ? "a validation split (2 or more)"
                                       : split == "train" ? strfmt("%d training shards (2 ids a shard or more)", shards).c_str()
                                                          : strfmt("%d training shards and a validation split", shards).c_str()));
        }))
        return 2;
    if (help) return 0;
    const int train_shards = n_train > 0 ? shards : 0;
    std::vector<std::string> splits;
    if (n_train > 0) splits.push_back("train");
    if (n_val > 0) splits.push_back("val");
    if (!agreed("tokens", [&] {
            if (rank == 0) prepare_out(out, splits, overwrite);
        }))
        return 2;
    const std::string source = join(inputs);
    if (!agreed("tokens", [&] {
            make_directories(out, "--out");  // a no-op on rank 0's filesystem; needed where nodes do not share it
            for (int sh = rank; sh < train_shards; sh += size)
                write_tokens(strfmt("%s/train-%05d-of-%05d.h5", out.c_str(), sh, train_shards), ids,
                             n_train * sh / train_shards, n_train * (sh + 1) / train_shards, tok, source);
            if (n_val > 0 && train_shards % size == rank)
                write_tokens(strfmt("%s/val-00000-of-00001.h5", out.c_str()), ids, n_train, ids.size(), tok, source);
        }))
        return 2;
    if (!agreed("tokens", [&] {
            if (rank == 0) complete_sums(out, splits);
        }))
        return 2;
    if (rank == 0)
        std::printf("dptrain-data tokens: %zu ids (%s vocabulary %ld) from %s (%s) -> %zu training ids in %d shard%s, %zu "
                    "validation ids, in %s\n",
                    ids.size(), tok.kind.c_str(), vocab_size, source.c_str(), used.c_str(), n_train, train_shards,
                    train_shards == 1 ? "" : "s", n_val, out.c_str());
    return 0;
}

} // namespace dptrain
