// GPT-2's byte-level BPE on a vocabulary the test makes: the merge order, GPT-2's pre-tokenizer
// (its pieces are where merges stop), round trips of any bytes, the stored table, and one clear
// error per bad file. The real vocabulary is checked against js-tiktoken in
// tests/integration/gpt2_tokenizer.sh.
#include "helpers.h"

#include "dptrain/core/error.h"
#include "dptrain/core/rng.h"
#include "dptrain/core/utf8.h"
#include "dptrain/data/bpe.h"
#include "dptrain/data/h5.h"
#include "dptrain/data/tokenizer.h"
#include "dptrain/data/tokens.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <map>
#include <set>

using namespace dptrain;

namespace {

// GPT-2's printable form of some bytes.
std::string printable(const std::string& bytes) {
    std::string out;
    for (unsigned char b : bytes) append_utf8(out, gpt2_printable_of(b));
    return out;
}

// Ids 0..255: the bytes; then one token per merge, in order. Each merge is given as its two
// parts' bytes.
struct TinyVocab {
    std::vector<std::pair<std::string, std::string>> merges = {
        {"h", "e"},    // 256 he
        {"l", "l"},    // 257 ll
        {"he", "ll"},  // 258 hell
        {"hell", "o"}, // 259 hello
        {" ", "w"},    // 260 " w"
        {"o", " "},    // 261 "o ": crosses a piece boundary, so never used
        {"'", "t"},    // 262 't
        {"1", "2"},    // 263 12
        {"a", "a"},    // 264 aa
        {"\n", "\n"},  // 265 two newlines
        {"'", "S"},    // 266 'S: GPT-2's contractions are lower case only
    };
    std::vector<std::string> extra;  // tokens after the merges' (GPT-2's last is <|endoftext|>)
    std::string encoder() const {
        nlohmann::ordered_json j = nlohmann::ordered_json::object();
        for (int b = 0; b < 256; ++b) j[printable(std::string(1, (char)b))] = b;
        int id = 256;
        for (auto& m : merges) j[printable(m.first + m.second)] = id++;
        for (auto& t : extra) j[printable(t)] = id++;
        return j.dump();
    }
    std::string merges_text() const {
        std::string out = "#version: 0.2\n";
        for (auto& m : merges) out += printable(m.first) + " " + printable(m.second) + "\n";
        return out;
    }
    std::shared_ptr<const Gpt2Bpe> bpe() const { return Gpt2Bpe::parse(encoder(), merges_text(), "tiny"); }
};

std::vector<int> enc(const Gpt2Bpe& b, const std::string& s) {
    std::vector<int> ids;
    b.encode(s, &ids);
    return ids;
}

std::string dec(const Gpt2Bpe& b, const std::vector<int>& ids) {
    std::string out;
    for (int id : ids) out += b.bytes_of(id);
    return out;
}

} // namespace

TEST_CASE("gpt2 BPE: merges apply lowest rank first, every occurrence left to right", "[bpe]") {
    auto b = TinyVocab().bpe();
    REQUIRE(b->size() == 267);
    CHECK(enc(*b, "hello") == std::vector<int>{259});
    CHECK(enc(*b, "aaa") == std::vector<int>{264, 'a'});
    CHECK(enc(*b, "aaaa") == std::vector<int>{264, 264});
    CHECK(enc(*b, "hel") == std::vector<int>{256, 'l'});
    CHECK(b->bytes_of(259) == "hello");
    CHECK(b->id_of("hell") == 258);
    CHECK(b->id_of("nope") == -1);
}

namespace {

// GPT-2's bpe() as its encoder.py writes it, on strings: each round finds the adjacent pair of
// lowest rank and merges it everywhere, left to right. The tokenizer must give these pieces.
std::vector<std::string> reference_bpe(const std::string& word,
                                       const std::map<std::pair<std::string, std::string>, size_t>& ranks) {
    std::vector<std::string> w;
    for (char c : word) w.emplace_back(1, c);
    for (;;) {
        auto best = ranks.end();
        for (size_t i = 0; i + 1 < w.size(); ++i) {
            auto it = ranks.find({w[i], w[i + 1]});
            if (it != ranks.end() && (best == ranks.end() || it->second < best->second)) best = it;
        }
        if (best == ranks.end()) return w;
        std::vector<std::string> merged;
        for (size_t i = 0; i < w.size();) {
            if (i + 1 < w.size() && w[i] == best->first.first && w[i + 1] == best->first.second)
                merged.push_back(w[i] + w[i + 1]), i += 2;
            else merged.push_back(w[i++]);
        }
        w = std::move(merged);
    }
}

// Merges of random pieces of "abcd" up to 8 letters, each part made by an earlier merge; shuffled,
// a merge may come before its parts' merges (GPT-2's files never do that; bpe() still decides).
TinyVocab random_vocab(Rng& rng, size_t count, bool shuffled) {
    TinyVocab v;
    v.merges.clear();
    std::vector<std::string> pool = {"a", "b", "c", "d"};
    std::set<std::string> made(pool.begin(), pool.end());
    while (v.merges.size() < count) {
        const std::string& x = pool[rng.next() % pool.size()];
        const std::string& y = pool[rng.next() % pool.size()];
        if (x.size() + y.size() > 8 || !made.insert(x + y).second) continue;
        v.merges.emplace_back(x, y);
        pool.push_back(x + y);
    }
    if (shuffled)
        for (size_t i = v.merges.size() - 1; i > 0; --i) std::swap(v.merges[i], v.merges[rng.next() % (i + 1)]);
    return v;
}

} // namespace

TEST_CASE("gpt2 BPE: every piece, short or thousands of bytes, gets bpe()'s ids", "[bpe]") {
    // Short pieces are merged by rescanning, long ones through a heap (a rescan costs O(n^2): 6 s
    // for a 128 KB word of GPT-2's vocabulary); lengths on both sides of the switch, past the
    // cache's limit, and in tables whose merges come before their parts'.
    Rng rng(11);
    for (bool shuffled : {false, true}) {
        const TinyVocab v = random_vocab(rng, 120, shuffled);
        std::map<std::pair<std::string, std::string>, size_t> ranks;
        for (size_t r = 0; r < v.merges.size(); ++r) ranks.emplace(v.merges[r], r);
        const auto b = v.bpe();
        for (int round = 0; round < 300; ++round) {
            const size_t n = round % 10 == 9 ? 200 + rng.next() % 3000 : 1 + rng.next() % 40;
            std::string word;
            for (size_t i = 0; i < n; ++i) word += "abcd"[rng.next() % 4];
            std::vector<int> want;
            for (const std::string& piece : reference_bpe(word, ranks)) want.push_back(b->id_of(piece));
            INFO("shuffled " << shuffled << ", " << n << " letters: " << word);
            REQUIRE(enc(*b, word) == want);
            REQUIRE(enc(*b, word) == want);  // again, from the cache where it was kept
        }
    }
}

TEST_CASE("gpt2 BPE: GPT-2's pre-tokenizer decides where merges stop", "[bpe]") {
    auto b = TinyVocab().bpe();
    // A space joins the word after it, never the one before: "o " (261) is never made.
    CHECK(enc(*b, "hello world") == std::vector<int>{259, 260, 'o', 'r', 'l', 'd'});
    // Contractions are pieces of their own ('t), and lower case only ('S is a symbol, then a letter).
    CHECK(enc(*b, "don't") == std::vector<int>{'d', 'o', 'n', 262});
    CHECK(enc(*b, "IT'S") == std::vector<int>{'I', 'T', '\'', 'S'});
    // Digits and letters part; a space joins a number, and merges go on inside " 12".
    CHECK(enc(*b, "x12 12") == std::vector<int>{'x', 263, ' ', 263});
    // Runs of spaces leave their last space to the next word.
    CHECK(enc(*b, "a  b") == std::vector<int>{'a', ' ', ' ', 'b'});
    // Newlines before a word are pieces of one ("\n", "\n"), at the end one run ("\n\n").
    CHECK(enc(*b, "a\n\nb") == std::vector<int>{'a', '\n', '\n', 'b'});
    CHECK(enc(*b, "a\n\n") == std::vector<int>{'a', 265});
    // Symbols run together with one leading space: " ('" is one piece, its bytes unmerged.
    CHECK(enc(*b, "x ('") == std::vector<int>{'x', ' ', '(', '\''});
    // U+FEFF is not white space (Unicode's White_Space, which GPT-2's regex and tiktoken use), so
    // the apostrophe after it is a symbol beside it, not a contraction ('t): JavaScript's \s
    // differs here, which is why the js-tiktoken comparison leaves U+FEFF out.
    CHECK(enc(*b, "\xEF\xBB\xBF't") == std::vector<int>{0xEF, 0xBB, 0xBF, '\'', 't'});
    // After a space the apostrophe is a symbol with the space (" '"), not a contraction.
    CHECK(enc(*b, " 't") == std::vector<int>{' ', '\'', 't'});
    CHECK(enc(*b, "x't") == std::vector<int>{'x', 262});
}

TEST_CASE("gpt2 BPE: any bytes round-trip, invalid UTF-8 and emoji included", "[bpe]") {
    auto b = TinyVocab().bpe();
    Rng rng(7);
    const std::vector<std::string> atoms = {"hello", " world", "don't", "\xF0\x9F\x99\x82", "\xC3\xA9", "12",
                                            "  ", "\n", "\t", "\xFF", "\xC3", "\x80\x80", "\xE2\x82", "aa", "'S"};
    for (int round = 0; round < 200; ++round) {
        std::string s;
        const int n = (int)(rng.next() % 40);
        for (int i = 0; i < n; ++i) {
            if (rng.next() % 4 == 0) s += (char)(rng.next() % 256);  // any byte at all
            else s += atoms[rng.next() % atoms.size()];
        }
        const std::vector<int> ids = enc(*b, s);
        REQUIRE(dec(*b, ids) == s);
        for (int id : ids) REQUIRE((id >= 0 && id < b->size()));
    }
}

TEST_CASE("gpt2 tokenizer: the stored table gives the same tokenizer back", "[bpe]") {
    const TinyVocab v;
    const Gpt2Tokenizer t(v.bpe());
    const TokenizerPtr p = tokenizer_from("gpt2", t.table());
    REQUIRE(p->kind() == TokenizerKind::gpt2);
    const Gpt2Tokenizer& back = static_cast<const Gpt2Tokenizer&>(*p);
    CHECK(back.same_as(t));
    CHECK(back.vocab_size() == 267);
    CHECK(back.encode("hello world, don't") == t.encode("hello world, don't"));
    CHECK(back.decode(back.encode("h\xC3\xA9llo")) == "h\xC3\xA9llo");
    CHECK(back.bytes_of(259) == 5);
    CHECK(nlohmann::json::parse(back.bpe().encoder_json()) == nlohmann::json::parse(v.encoder()));
    CHECK(back.bpe().merges_text() == v.merges_text());
    // What an export writes for Hugging Face's GPT2Tokenizer: the two files.
    const std::vector<TokenizerFile> files = back.hf_files();
    REQUIRE(files.size() == 2);
    CHECK(files[0].name == "vocab.json");
    CHECK(files[0].bytes == back.bpe().encoder_json() + "\n");
    CHECK(files[1].name == "merges.txt");
    CHECK(files[1].bytes == v.merges_text());
    // A tokenizer from other merges differs.
    TinyVocab w;
    w.merges.pop_back();
    CHECK_FALSE(make_gpt2_tokenizer(w.bpe())->same_as(t));
    CHECK_FALSE(make_byte_tokenizer()->same_as(t));
    CHECK_THROWS_WITH(tokenizer_from("gpt2", "gpt2-bpe 1\n300\nĠ\n"), Catch::Contains("truncated"));
    CHECK_THROWS_WITH(tokenizer_from("gpt2", "bpe\n"), Catch::Contains("damaged"));
}

TEST_CASE("gpt2 tokenizer: bits per byte count <|endoftext|> as no bytes of text", "[bpe]") {
    // dptrain-data puts it after every document; counted as its 13 printable bytes it made bits
    // per byte about 1.5% low on documents of 900 bytes.
    TinyVocab v;
    v.extra = {"<|endoftext|>"};
    const Gpt2Tokenizer t(v.bpe());
    REQUIRE(t.bpe().endoftext() == 267);
    CHECK(t.end_of_text() == 267);
    CHECK(t.bytes_of(267) == 0);
    CHECK(t.bytes_of(259) == 5);  // hello
    CHECK(TinyVocab().bpe()->endoftext() == -1);
}

TEST_CASE("gpt2 tokenizer: a corpus is cut only at a newline between visible characters", "[bpe]") {
    // GPT-2's pre-tokenizer groups a run of white space with the newline: "x \n" cut after the
    // newline would encode differently.
    const Gpt2Tokenizer t(TinyVocab().bpe());
    const std::string text = "x \ny\nz";
    CHECK(t.next_cut(text, 1) == 5);
    CHECK(make_byte_tokenizer()->next_cut(text, 1) == 3);
    CHECK(t.next_cut("x \ny", 1) == 4);  // none: the end
}

TEST_CASE("gpt2 BPE: bad encoder.json and vocab.bpe get one line naming the entry", "[bpe]") {
    const TinyVocab v;
    CHECK_THROWS_WITH(Gpt2Bpe::parse("{not json", v.merges_text(), "enc.json"), Catch::Contains("enc.json: the encoder is not JSON"));
    CHECK_THROWS_WITH(Gpt2Bpe::parse("[1, 2]", v.merges_text(), "enc.json"), Catch::Contains("JSON object"));
    nlohmann::json gap = nlohmann::json::parse(v.encoder());
    gap["hello"] = 400;
    CHECK_THROWS_WITH(Gpt2Bpe::parse(gap.dump(), v.merges_text(), "enc.json"),
                      Catch::Contains("token \"hello\" has id 400"));
    nlohmann::json no_byte = nlohmann::json::parse(v.encoder());
    no_byte.erase(printable("A"));
    no_byte["Z!"] = 'A';  // keep the ids 0..N-1
    CHECK_THROWS_WITH(Gpt2Bpe::parse(no_byte.dump(), v.merges_text(), "enc.json"), Catch::Contains("no token for byte 0x41"));
    nlohmann::json spaced = nlohmann::json::parse(v.encoder());
    spaced.erase(printable("hello"));
    spaced["hel lo"] = 259;
    CHECK_THROWS_WITH(Gpt2Bpe::parse(spaced.dump(), v.merges_text(), "enc.json"),
                      Catch::Contains("\"hel lo\" is not in GPT-2's byte-level form"));
    CHECK_THROWS_WITH(Gpt2Bpe::parse(v.encoder(), v.merges_text() + "q z\n", "m.bpe"),
                      Catch::Contains("merge 12 \"q z\" is not two tokens whose join is a token"));
    CHECK_THROWS_WITH(Gpt2Bpe::parse(v.encoder(), v.merges_text() + "hello\n", "m.bpe"), Catch::Contains("merge 12"));
    CHECK_THROWS_WITH(Gpt2Bpe::load("/nonexistent/encoder.json", "/nonexistent/vocab.bpe"),
                      Catch::Contains("--encoder /nonexistent/encoder.json: cannot read"));
}

TEST_CASE("h5::write_text keeps short text in an attribute and long text in a dataset", "[bpe]") {
    const std::string path = testing::temp_dir("text") + "/t.h5";
    const std::string shortv = "abc", longv(200000, 'x');
    {
        std::lock_guard<std::mutex> g(h5::lock());
        h5::Hid f = h5::create_file(path);
        h5::write_text(f.get(), "a", shortv);
        h5::write_text(f.get(), "b", longv);
    }
    std::lock_guard<std::mutex> g(h5::lock());
    h5::Hid f = h5::open_file(path, "");
    CHECK(h5::has_attr(f.get(), "a"));
    CHECK_FALSE(h5::has_attr(f.get(), "b"));
    CHECK(h5::read_text(f.get(), "a") == shortv);
    CHECK(h5::read_text(f.get(), "b") == longv);
    CHECK_THROWS_WITH(h5::read_text(f.get(), "c"), Catch::Contains("attribute c missing"));
}

// A tokenizer.json vocabulary's first 256 entries, "{" and each byte's GPT-2 printable form: id, with
// no closing brace (the caller adds its tokens).
static std::string byte_vocab_json() {
    std::string vocab = "{";
    for (int b = 0; b < 256; ++b) {
        std::string printable;
        const uint32_t cp = gpt2_printable_of((unsigned char)b);
        if (cp < 0x80) printable = std::string(1, (char)cp);
        else printable = std::string{(char)(0xC0 | (cp >> 6)), (char)(0x80 | (cp & 0x3F))};
        vocab += (b ? "," : "") + nlohmann::json(printable).dump() + ":" + std::to_string(b);
    }
    return vocab;
}

// The tokenizer.json form (bpe_tokenizer.sh holds its ids to an independent encoder): special
// tokens split out of the text first, the leftmost and then the longest; their bytes count as no
// text; the table and the tokenizer.json it writes give it back.
TEST_CASE("bpe from tokenizer.json: special tokens, ignore_merges, the table and the file round trip", "[tokens]") {
    std::string vocab = byte_vocab_json();
    vocab += ",\"ab\":256,\"Ġabc\":257}";  // "Ġabc": no merge makes it, ignore_merges takes it whole
    const std::string json =
        R"({"added_tokens":[{"id":258,"content":"<|a|>"},{"id":259,"content":"<|a|><|b|>"}],"normalizer":null,)"
        R"("pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false,"use_regex":true},)"
        R"("model":{"type":"BPE","ignore_merges":true,"vocab":)" + vocab + R"(,"merges":[["a","b"]]}})";
    const auto bpe = Gpt2Bpe::parse_tokenizer_json(json, "test");
    REQUIRE(bpe->json_form());
    CHECK(bpe->size() == 260);
    std::vector<int> ids;
    bpe->encode("ab<|a|><|b|>x abc<|a|>", &ids);
    CHECK(ids == std::vector<int>{256, 259, 'x', 257, 258});  // the longer special where both start
    CHECK(bpe->is_special(258));
    CHECK_FALSE(bpe->is_special(256));
    const auto tok = make_gpt2_tokenizer(bpe);
    CHECK(tok->kind() == TokenizerKind::bpe);
    CHECK(tok->bytes_of(259) == 0);
    CHECK(tok->bytes_of(257) == 4);
    for (const auto& again : {Gpt2Bpe::from_table(bpe->table()), Gpt2Bpe::parse_tokenizer_json(bpe->tokenizer_json(), "again")}) {
        std::vector<int> ids2;
        again->encode("ab<|a|><|b|>x abc<|a|>", &ids2);
        CHECK(ids2 == ids);
        CHECK(again->table() == bpe->table());
    }
    CHECK_THROWS_AS(tokenizer_from(TokenizerKind::gpt2, bpe->table()), UserError);  // the other form's table
}

// A tokenizer.json's post_processor: the ids its TemplateProcessing puts around one sequence (Llama
// 3's <|begin_of_text|> $A), read through a Sequence with ByteLevel, kept in the table (version 2;
// a tokenizer without them keeps version 1's table) and written back; prompts begin with them.
TEST_CASE("bpe from tokenizer.json: a post_processor's template puts ids around a sequence", "[tokens]") {
    std::string vocab = byte_vocab_json();
    vocab += ",\"ab\":256}";
    auto file = [&](const std::string& post) {
        return R"({"added_tokens":[{"id":257,"content":"<s>"},{"id":258,"content":"</s>"}],"normalizer":null,)"
               R"("pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false,"use_regex":true},"post_processor":)" +
               post + R"(,"model":{"type":"BPE","vocab":)" + vocab + R"(,"merges":["a b"]}})";
    };
    const std::string specials = R"("special_tokens":{"<s>":{"id":"<s>","ids":[257],"tokens":["<s>"]},)"
                                 R"("</s>":{"id":"</s>","ids":[258],"tokens":["</s>"]}})";
    const std::string bos = R"({"type":"Sequence","processors":[{"type":"ByteLevel","trim_offsets":false},)"
                            R"({"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"<s>","type_id":0}},)"
                            R"({"Sequence":{"id":"A","type_id":0}}],)" + specials + "}]}";
    const auto plain = Gpt2Bpe::parse_tokenizer_json(file("null"), "plain");
    CHECK(plain->sequence_prefix().empty());
    CHECK(plain->table().rfind("bpe-json 1\n", 0) == 0);  // tables written before templates stay as they were
    const auto bpe = Gpt2Bpe::parse_tokenizer_json(file(bos), "bos");
    CHECK(bpe->sequence_prefix() == std::vector<int>{257});
    CHECK(bpe->sequence_suffix().empty());
    CHECK(bpe->table().rfind("bpe-json 2\n", 0) == 0);
    const auto tok = make_gpt2_tokenizer(bpe);
    CHECK(tok->encode("ab") == std::vector<int>{256});
    CHECK(tok->encode_prompt("ab") == std::vector<int>{257, 256});
    CHECK(make_gpt2_tokenizer(plain)->encode_prompt("ab") == std::vector<int>{256});
    CHECK_FALSE(tok->same_as(*make_gpt2_tokenizer(plain)));  // the same vocabulary, other ids for a document
    for (const auto& again :
         {Gpt2Bpe::from_table(bpe->table()), Gpt2Bpe::parse_tokenizer_json(bpe->tokenizer_json(), "again")}) {
        CHECK(again->sequence_prefix() == std::vector<int>{257});
        CHECK(again->table() == bpe->table());
    }
    // Before and after, two ids before: all in the template's order.
    const std::string both = R"({"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"<s>","type_id":0}},)"
                             R"({"SpecialToken":{"id":"</s>","type_id":0}},{"Sequence":{"id":"A","type_id":0}},)"
                             R"({"SpecialToken":{"id":"</s>","type_id":0}}],)" + specials + "}";
    const auto wrapped = Gpt2Bpe::parse_tokenizer_json(file(both), "both");
    CHECK(wrapped->sequence_prefix() == std::vector<int>{257, 258});
    CHECK(wrapped->sequence_suffix() == std::vector<int>{258});
    const auto back = Gpt2Bpe::from_table(wrapped->table());
    CHECK(back->sequence_prefix() == wrapped->sequence_prefix());
    CHECK(back->sequence_suffix() == wrapped->sequence_suffix());
    CHECK(Gpt2Bpe::parse_tokenizer_json(wrapped->tokenizer_json(), "again")->table() == wrapped->table());
    // What it does not compute as Hugging Face does: one line naming it.
    CHECK_THROWS_WITH(Gpt2Bpe::parse_tokenizer_json(file(R"({"type":"BertProcessing"})"), "f"),
                      Catch::Contains("post_processor \"BertProcessing\""));
    CHECK_THROWS_WITH(
        Gpt2Bpe::parse_tokenizer_json(
            file(R"({"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"<s>","type_id":0}}],)" + specials +
                 "}"),
            "f"),
        Catch::Contains("must hold the sequence $A once"));
    CHECK_THROWS_WITH(Gpt2Bpe::parse_tokenizer_json(
                          file(R"({"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"<x>","type_id":0}},)"
                               R"({"Sequence":{"id":"A","type_id":0}}],)" + specials + "}"),
                          "f"),
                      Catch::Contains("names the special token \"<x>\""));
    CHECK_THROWS_WITH(Gpt2Bpe::parse_tokenizer_json(
                          file(R"({"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"<s>","type_id":0}},)"
                               R"({"Sequence":{"id":"A","type_id":0}}],"special_tokens":{"<s>":{"ids":[900]}}})"),
                          "f"),
                      Catch::Contains("puts id 900 around a sequence"));
}
