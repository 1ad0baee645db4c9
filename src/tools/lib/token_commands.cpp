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
    h5::write_attr_str(f.get(), "tokenizer", tok.name());
    if (tok.has_table()) h5::write_text(f.get(), "vocab", tok.table());
    h5::write_attr_str(f.get(), "source", source);
}

// This rank's shards: training shard s (ids [0, n_train) cut evenly) when s % size == rank, then
// the validation shard (the rest) on rank train_shards % size.
template <typename Id>
void write_shards(const std::string& out, const std::vector<Id>& ids, size_t n_train, int train_shards, bool val,
                  const Tokenizer& tok, const std::string& source, int rank, int size) {
    make_directories(out, "--out");  // for nodes that do not share rank 0's filesystem
    for (int s = rank; s < train_shards; s += size)
        write_tokens(strfmt("%s/train-%05d-of-%05d.h5", out.c_str(), s, train_shards), ids, n_train * s / train_shards,
                     n_train * (s + 1) / train_shards, tok, source);
    if (val && train_shards % size == rank)
        write_tokens(strfmt("%s/val-00000-of-00001.h5", out.c_str()), ids, n_train, ids.size(), tok, source);
}

void prepare_on_rank0(const std::string& out, const std::vector<std::string>& splits, bool overwrite, int rank) {
    if (rank == 0) prepare_out(out, splits, overwrite);
}
void sums_on_rank0(const std::string& out, const std::vector<std::string>& splits, int rank) {
    if (rank == 0) complete_sums(out, splits);
}

struct TextTokenizer {
    std::string name, encoder, merges, sp_model, sp_type, tokenizer_json;  // name: --tokenizer as given
    int vocab_size = 0;
    TokenizerKind kind = TokenizerKind::chars;  // set by check_tokenizer
};

// Sets o->kind and checks the tokenizer's files before any text is read. Null for kinds made
// from the text later (char, a SentencePiece model to train).
TokenizerPtr check_tokenizer(TextTokenizer* o) {
    // ids are made by `tokens` alone: text has no vocabulary size to declare.
    if (!parse_tokenizer_kind(o->name, &o->kind) || o->kind == TokenizerKind::ids)
        throw UserError(
            strfmt("text: --tokenizer '%s' is unknown; use byte, char, gpt2, bpe or sentencepiece", o->name.c_str()));
    const TokenizerKind kind = o->kind;
    if (kind != TokenizerKind::gpt2 && (!o->encoder.empty() || !o->merges.empty()))
        throw UserError("text: --encoder and --merges belong to --tokenizer gpt2");
    if (kind != TokenizerKind::bpe && !o->tokenizer_json.empty())
        throw UserError("text: --tokenizer-json belongs to --tokenizer bpe");
    if (kind != TokenizerKind::sentencepiece && (!o->sp_model.empty() || o->vocab_size != 0))
        throw UserError("text: --sp-model and --vocab-size belong to --tokenizer sentencepiece");
    switch (kind) {
    case TokenizerKind::byte:
        return make_byte_tokenizer();
    case TokenizerKind::gpt2:
        if (o->encoder.empty() || o->merges.empty())
            throw UserError("text: --tokenizer gpt2 needs GPT-2's files: --encoder encoder.json --merges vocab.bpe "
                            "(Hugging Face's vocab.json and merges.txt are the same files)");
        return make_gpt2_tokenizer(o->encoder, o->merges);
    case TokenizerKind::bpe:
        if (o->tokenizer_json.empty())
            throw UserError("text: --tokenizer bpe needs the model's tokenizer.json: --tokenizer-json FILE");
        return make_gpt2_tokenizer(Gpt2Bpe::load_tokenizer_json(o->tokenizer_json));
    case TokenizerKind::sentencepiece:
        if (!o->sp_model.empty() && o->vocab_size != 0)
            throw UserError("text: give --sp-model (a model of your own) or --vocab-size (train one here), not both");
        if (!o->sp_model.empty()) return make_sentencepiece_tokenizer(SentencePieceModel::load(o->sp_model));
        if (o->vocab_size < 260 || o->vocab_size > 1000000)
            throw UserError(strfmt("text: --vocab-size %d: a SentencePiece model trained here needs 260 to 1000000 "
                                   "pieces (its 256 byte pieces and more; 1024 to 32768 are usual)",
                                   o->vocab_size));
        if (o->sp_type != "bpe" && o->sp_type != "unigram")
            throw UserError(strfmt("text: --sp-type '%s' is unknown; use bpe or unigram", o->sp_type.c_str()));
        return nullptr;
    case TokenizerKind::chars:
    case TokenizerKind::ids:
        break;
    }
    return nullptr;
}

// char takes its characters from all the text; a SentencePiece model trains on the first
// `train_bytes` alone, so the validation text stays unseen.
TokenizerPtr make_tokenizer(TokenizerPtr tok, const TextTokenizer& o, const std::string& data, size_t train_bytes) {
    if (tok) return tok;
    if (o.kind == TokenizerKind::chars) return make_char_tokenizer(data);
    const int threads = std::max(1, (int)std::thread::hardware_concurrency());
    return make_sentencepiece_tokenizer(SentencePieceModel::train(data, train_bytes, o.vocab_size, o.sp_type, threads));
}

// Cuts into `parts` pieces that encode alone to the whole's ids: at file ends when each file is a
// document, else at Tokenizer::next_cut (a SentencePiece model that does not encode line by line
// is not cut). Returns parts + 1 offsets.
std::vector<size_t> chunk_cuts(const std::string& data, const std::vector<size_t>& ends, bool per_file,
                               const Tokenizer& tok, int parts) {
    std::vector<size_t> cuts((size_t)parts + 1, data.size());
    cuts[0] = 0;
    for (int r = 1; r < parts; ++r) {
        size_t p = std::max(cuts[(size_t)r - 1], data.size() / parts * r);
        if (per_file) p = *std::lower_bound(ends.begin(), ends.end(), p);
        else p = tok.next_cut(data, p);
        cuts[(size_t)r] = p;
    }
    return cuts;
}

// Each file in data[begin, end) a document followed by `eot` when eot >= 0; else the files joined
// are one, whose start is in the first chunk (rank 0's) and end in the last. A document is wrapped
// in the tokenizer's sequence_prefix and _suffix (Llama 3's <|begin_of_text|>), as Hugging Face's
// tokenizers wrap each text they encode.
void encode_range(const Tokenizer& tok, const std::string& data, size_t begin, size_t end,
                  const std::vector<size_t>& ends, int eot, bool first, bool last, std::vector<int>* ids) {
    const std::vector<int>&pre = tok.sequence_prefix(), &post = tok.sequence_suffix();
    if (eot < 0) {
        if (first) ids->insert(ids->end(), pre.begin(), pre.end());
        if (end > begin) tok.encode_into(data.substr(begin, end - begin), ids);
        if (last) ids->insert(ids->end(), post.begin(), post.end());
        return;
    }
    // A file belongs to the chunk its end falls in; an empty first file to the first.
    for (size_t at = begin, f = 0; f < ends.size(); ++f)
        if ((ends[f] > begin || begin == 0) && ends[f] <= end) {
            ids->insert(ids->end(), pre.begin(), pre.end());
            tok.encode_into(data.substr(at, ends[f] - at), ids);
            ids->insert(ids->end(), post.begin(), post.end());
            ids->push_back(eot);
            at = ends[f];
        }
}

// Collective: every rank's ids, in rank order, on every rank; `total` is their count.
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

// Collective: rank 0's trained SentencePiece model to every rank.
void share_model(TokenizerPtr* tok) {
    MpiCommunicator world(MPI_COMM_WORLD);
    std::string model = world.rank() == 0 && *tok ? (*tok)->table() : "";
    long n = (long)model.size();
    MPI_CHECK(MPI_Bcast(&n, 1, MPI_LONG, 0, MPI_COMM_WORLD));
    model.resize((size_t)n);
    MPI_CHECK(MPI_Bcast(model.data(), (int)n, MPI_BYTE, 0, MPI_COMM_WORLD));
    if (world.rank() != 0) *tok = make_sentencepiece_tokenizer(SentencePieceModel::from_bytes(model, "rank 0's model"));
}

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
        "tokenizer", po::value(&a->tt.name)->default_value(name_of(TokenizerKind::chars)),
        "byte (256 ids) | char (the text's characters, in code-point order) | gpt2 (GPT-2's byte-level BPE, from "
        "--encoder and --merges) | bpe (a byte-level BPE from a Hugging Face tokenizer.json, Llama 3's or Qwen2's: "
        "--tokenizer-json) | sentencepiece (trained here at --vocab-size, or --sp-model)")(
        "tokenizer-json", po::value(&a->tt.tokenizer_json),
        "bpe: the model's tokenizer.json (its pre-tokenizer pattern and special tokens are kept with the shards)")(
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

struct TextRun {
    TextArgs a;
    TokenizerPtr tok;  // null until step 2 for char and a model to train
    std::vector<std::string> files;
    std::vector<size_t> ends;  // each file's end in data
    std::string data, source;
    int eot = -1;  // appended after each file when >= 0
    long total = 0;  // ids over all ranks
    size_t n_val = 0, n_train = 0;
};

// Step 1: options, tokenizer files, all the text. Returns whether --help was asked.
bool read_text_step(TextRun* r, int argc, char** argv, const po::options_description& desc, bool rank0) {
    TextArgs& a = r->a;
    if (parse_or_help(argc, argv, desc, "", rank0)) return true;
    if (a.inputs.empty()) throw UserError("text: give the text with --input FILE, DIR or PATTERN");
    if (!a.vocab.empty()) a.tt.name = a.vocab;
    r->tok = check_tokenizer(&a.tt);
    if (!(a.val_fraction > 0 && a.val_fraction < 1) || a.shards < 1)
        throw UserError("text: --val-fraction must be in (0, 1) and --shards >= 1");
    r->files = text_files(a.inputs);
    // GPT-2's documents end in <|endoftext|> (as nanoGPT's OpenWebText); others join with newlines.
    r->eot = r->tok && r->files.size() > 1 ? r->tok->end_of_text() : -1;
    r->data = read_texts(r->files, r->eot < 0, &r->ends);
    // char and a SentencePiece model to train read characters too.
    if (!r->tok || r->tok->needs_utf8()) check_utf8(r->files, r->data, r->ends, name_of(a.tt.kind));
    r->source = r->files.size() == 1 ? r->files[0]
                                     : strfmt("%zu files: %s ... %s", r->files.size(), r->files.front().c_str(),
                                              r->files.back().c_str());
    return false;
}

void check_text_counts(const TextRun& r) {
    if (r.total > INT_MAX)
        throw UserError(strfmt("text: %ld tokens, more than one run takes (2^31); make several --out sets of fewer "
                               "files and give dptrain their shards together",
                               r.total));
    if (r.n_train < (size_t)r.a.shards * 2 || r.n_val < 2)
        throw UserError(strfmt("text: --input %s holds only %ld tokens: too little for %d shards and a validation split",
                               r.source.c_str(), r.total, r.a.shards));
}

// "<|begin_of_text|> (id 128000)", each of ids so.
std::string named_ids(const Tokenizer& tok, const std::vector<int>& ids) {
    std::string out;
    for (int id : ids) out += strfmt("%s%s (id %d)", out.empty() ? "" : " ", tok.decode({id}).c_str(), id);
    return out;
}

void print_text_summary(const TextRun& r, int size) {
    std::string joined = r.eot >= 0 ? ", each followed by " + named_ids(*r.tok, {r.eot}) : "";
    const std::vector<int>&pre = r.tok->sequence_prefix(), &post = r.tok->sequence_suffix();
    if (!pre.empty()) joined += ", each document after " + named_ids(*r.tok, pre);
    if (!post.empty()) joined += std::string(pre.empty() ? ", each document" : " and") + " before " + named_ids(*r.tok, post);
    if (!pre.empty() || !post.empty()) joined += " (the tokenizer's post_processor)";
    std::printf("dptrain-data text: %ld tokens from %s%s (%s vocabulary of %d) -> %zu training tokens in %d shard%s, "
                "%zu validation tokens, in %s (%d rank%s)\n",
                r.total, r.source.c_str(), joined.c_str(), r.tok->name(), r.tok->vocab_size(), r.n_train, r.a.shards,
                r.a.shards == 1 ? "" : "s", r.n_val, r.a.out.c_str(), size, size == 1 ? "" : "s");
}

} // namespace

// Every rank runs the same steps; each `agreed` is a collective (one rank without mpirun):
//   1. every rank parses the options, checks the tokenizer's files and reads all the text;
//   2. char: from the text on every rank; a SentencePiece model is trained on rank 0 and sent;
//   3. rank r encodes piece r (chunk_cuts); every rank gathers all the ids;
//   4. rank 0 prepares --out; shard i (train shards, then val) is written by rank i % ranks.
int text_cmd(int argc, char** argv) {
    const MpiScope mpi;
    MpiCommunicator world(MPI_COMM_WORLD);
    const int rank = world.rank(), size = world.size();
    TextRun r;
    const po::options_description desc = text_options(&r.a);
    bool help = false;
    // 1.
    if (!agreed("text", [&] { help = read_text_step(&r, argc, argv, desc, rank == 0); })) return 2;
    if (help) return 0;
    // 2.
    const bool train_sp = !r.tok && r.a.tt.kind == TokenizerKind::sentencepiece;
    const size_t train_bytes = (size_t)(r.data.size() * (1 - r.a.val_fraction));
    if (!agreed("text", [&] {
            if (rank == 0 || !train_sp) r.tok = make_tokenizer(r.tok, r.a.tt, r.data, train_bytes);
        }))
        return 2;
    if (train_sp) share_model(&r.tok);
    // 3.
    std::vector<int> mine;
    if (!agreed("text", [&] {
            const std::vector<size_t> cuts = chunk_cuts(r.data, r.ends, r.eot >= 0, *r.tok, size);
            encode_range(*r.tok, r.data, cuts[(size_t)rank], cuts[(size_t)rank + 1], r.ends, r.eot, rank == 0,
                         rank == size - 1, &mine);
        }))
        return 2;
    const std::vector<int> ids = gather_ids(mine, &r.total);
    // 4.
    r.n_val = (size_t)(r.total * r.a.val_fraction);
    r.n_train = (size_t)r.total - r.n_val;
    const std::vector<std::string> splits = {"train", "val"};
    if (!agreed("text", [&] {
            check_text_counts(r);
            prepare_on_rank0(r.a.out, splits, r.a.overwrite, rank);
        }))
        return 2;
    if (!agreed("text", [&] { write_shards(r.a.out, ids, r.n_train, r.a.shards, true, *r.tok, r.source, rank, size); }))
        return 2;
    if (!agreed("text", [&] { sums_on_rank0(r.a.out, splits, rank); })) return 2;
    if (rank == 0) print_text_summary(r, size);
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

// GPT-2's BPE from its files (which set vocab_size when it is 0), or bare ids of vocab_size.
TokenizerPtr tokenizer_of_ids(const std::string& encoder, const std::string& merges, long* vocab_size) {
    if (!encoder.empty() || !merges.empty()) {
        if (encoder.empty() || merges.empty())
            throw UserError("tokens: GPT-2's BPE needs both files: --encoder encoder.json --merges vocab.bpe");
        TokenizerPtr tok = make_gpt2_tokenizer(encoder, merges);
        if (*vocab_size != 0 && *vocab_size != tok->vocab_size())
            throw UserError(strfmt("tokens: --vocab-size %ld, but --encoder %s holds %d tokens; leave --vocab-size out",
                                   *vocab_size, encoder.c_str(), tok->vocab_size()));
        *vocab_size = tok->vocab_size();
        return tok;
    }
    if (*vocab_size < 2 || *vocab_size > INT32_MAX)
        throw UserError("tokens: give the tokenizer's vocabulary size with --vocab-size V (GPT-2's BPE: 50257), or "
                        "its files with --encoder and --merges");
    return make_ids_tokenizer((int)*vocab_size);
}

struct TokensArgs {
    std::vector<std::string> inputs;
    std::string out, format, split, dataset, encoder, merges;
    long vocab_size = 0;
    double val_fraction = 0.1;
    int shards = 1;
    bool overwrite = false;
};

po::options_description tokens_options(TokensArgs* a) {
    po::options_description desc("dptrain-data tokens: token shards from ids tokenized elsewhere", 100, 50);
    desc.add_options()("help,h", "print this help")("input", po::value(&a->inputs), "token file; repeat for several")(
        "out", po::value(&a->out)->default_value(""), "output directory")(
        "format", po::value(&a->format)->default_value("auto"), "auto | nanogpt | llmc | npy | hdf5")(
        "dataset", po::value(&a->dataset)->default_value("/tokens"), "hdf5: the dataset of ids")(
        "vocab-size", po::value(&a->vocab_size)->default_value(0), "the tokenizer's vocabulary size (GPT-2: 50257)")(
        "encoder", po::value(&a->encoder), "GPT-2's encoder.json (or vocab.json): the ids are GPT-2's BPE")(
        "merges", po::value(&a->merges), "GPT-2's vocab.bpe (or merges.txt), with --encoder")(
        "split", po::value(&a->split)->default_value(""), "train | val: every id to that split (default: both)")(
        "val-fraction", po::value(&a->val_fraction)->default_value(0.1), "the ids' tail kept for validation")(
        "shards", po::value(&a->shards)->default_value(1), "shards of the training split")(
        "overwrite", po::bool_switch(&a->overwrite), "replace the shards already in --out");
    return desc;
}

struct TokensRun {
    TokensArgs a;
    TokenizerPtr tok;
    std::vector<uint32_t> ids;  // the only copy once read
    std::string used;           // the inputs' formats
    size_t n_val = 0, n_train = 0;
};

void read_token_inputs(TokensRun* r) {
    const token_files::Format f = token_files::parse_format(r->a.format);
    for (const std::string& in : r->a.inputs) {
        token_files::Format got = f;
        std::vector<uint32_t> part = token_files::read(in, f, r->a.vocab_size, &got, r->a.dataset);
        if (r->ids.empty()) r->ids = std::move(part);  // one file, the usual case: no copy
        else r->ids.insert(r->ids.end(), part.begin(), part.end());
        r->used += std::string(r->used.empty() ? "" : ", ") + token_files::format_name(got);
    }
}

// Refused when a shard would hold fewer than 2 ids.
void split_ids(TokensRun* r) {
    const TokensArgs& a = r->a;
    const size_t n = r->ids.size();
    r->n_val = a.split == "val" ? n : a.split == "train" ? 0 : (size_t)(n * a.val_fraction);
    r->n_train = n - r->n_val;
    if ((r->n_train > 0 && r->n_train < (size_t)a.shards * 2) || (r->n_val > 0 && r->n_val < 2) || n < 2)
        throw UserError(strfmt("tokens: %zu ids in %s: too few for %s", n,
                               a.inputs.size() == 1 ? a.inputs[0].c_str() : "the inputs",
                               a.split == "val" ? "a validation split (2 or more)"
                               : a.split == "train"
                                   ? strfmt("%d training shards (2 ids a shard or more)", a.shards).c_str()
                                   : strfmt("%d training shards and a validation split", a.shards).c_str()));
}

// Step 1: options, tokenizer, every id read and checked, the split. Returns whether --help was
// asked.
bool read_ids_step(TokensRun* r, int argc, char** argv, const po::options_description& desc, bool rank0) {
    TokensArgs& a = r->a;
    if (parse_or_help(argc, argv, desc, kTokensHelp, rank0)) return true;
    if (a.inputs.empty()) throw UserError("tokens: give the token files with --input FILE");
    if (a.out.empty()) throw UserError("tokens: give the output directory with --out DIR");
    r->tok = tokenizer_of_ids(a.encoder, a.merges, &a.vocab_size);
    if (!a.split.empty() && a.split != "train" && a.split != "val")
        throw UserError(strfmt("tokens: --split '%s' is unknown; use train or val", a.split.c_str()));
    if ((a.split.empty() && !(a.val_fraction > 0 && a.val_fraction < 1)) || a.shards < 1)
        throw UserError("tokens: --val-fraction must be in (0, 1) and --shards >= 1");
    read_token_inputs(r);
    split_ids(r);
    return false;
}

} // namespace

// Under mpirun: every rank reads all the files (deterministic readers: the same ids or the same
// failure), rank 0 prepares --out, and shard i is written by rank i % ranks.
int tokens_cmd(int argc, char** argv) {
    const MpiScope mpi;
    MpiCommunicator world(MPI_COMM_WORLD);
    const int rank = world.rank(), size = world.size();
    TokensRun r;
    const po::options_description desc = tokens_options(&r.a);
    bool help = false;
    if (!agreed("tokens", [&] { help = read_ids_step(&r, argc, argv, desc, rank == 0); })) return 2;
    if (help) return 0;
    const TokensArgs& a = r.a;
    const int train_shards = r.n_train > 0 ? a.shards : 0;
    std::vector<std::string> splits;
    if (r.n_train > 0) splits.push_back("train");
    if (r.n_val > 0) splits.push_back("val");
    if (!agreed("tokens", [&] { prepare_on_rank0(a.out, splits, a.overwrite, rank); })) return 2;
    const std::string source = join(a.inputs);
    if (!agreed("tokens", [&] {
            write_shards(a.out, r.ids, r.n_train, train_shards, r.n_val > 0, *r.tok, source, rank, size);
        }))
        return 2;
    if (!agreed("tokens", [&] { sums_on_rank0(a.out, splits, rank); })) return 2;
    if (rank == 0)
        std::printf("dptrain-data tokens: %zu ids (%s vocabulary %ld) from %s (%s) -> %zu training ids in %d shard%s, %zu "
                    "validation ids, in %s\n",
                    r.ids.size(), r.tok->name(), a.vocab_size, source.c_str(), r.used.c_str(), r.n_train, train_shards,
                    train_shards == 1 ? "" : "s", r.n_val, a.out.c_str());
    return 0;
}

} // namespace dptrain
