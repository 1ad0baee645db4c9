// The sentencepiece tokenizer: a model trained on text the test makes, round trips of UTF-8 text
// (spaces, newlines, characters the training never saw: byte pieces), what each id counts for
// bits per byte, the stored model, and one clear line for a bad model or bad UTF-8. The model
// a shard carries is read by Python's sentencepiece in tests/integration/sentencepiece.sh.
#include "dptrain/core/error.h"
#include "dptrain/core/rng.h"
#include "dptrain/data/tokens.h"

#include <catch2/catch.hpp>

#include <cstdint>

using namespace dptrain;

namespace {

std::string sentences(int n, uint64_t seed) {
    const char* words[] = {"the", "rank", "gradient", "all-reduce", "node", "step", "loss", "falls", "over", "a",
                           "checkpoint", "shard", "token", "model", "batch", "of", "and", "GPU", "fast", "42"};
    Rng rng(seed);
    std::string out;
    for (int s = 0; s < n; ++s) {
        const int len = 3 + (int)(rng.next() % 9);
        for (int w = 0; w < len; ++w) out += std::string(w ? " " : "") + words[rng.next() % 20];
        out += rng.next() % 3 ? ".\n" : ", and  then\n";
    }
    return out;
}

const Tokenizer& trained() {
    static const TokenizerPtr t = make_sentencepiece_tokenizer(SentencePieceModel::train(sentences(3000, 1), SIZE_MAX, 400, "bpe", 1));
    return *t;
}

} // namespace

TEST_CASE("sentencepiece: ids of any UTF-8 text decode to it, byte for byte", "[sentencepiece]") {
    const Tokenizer& t = trained();
    REQUIRE(t.vocab_size() == 400);
    for (const std::string& s : {sentences(50, 9), std::string("  two  spaces, a tab\tand\n\nnewlines \n"),
                                 std::string("na\xC3\xAFve caf\xC3\xA9 \xE6\x97\xA5\xE6\x9C\xAC \xF0\x9F\x99\x82 unseen")}) {
        const std::vector<int> ids = t.encode(s);
        CHECK(t.decode(ids) == s);
        long bytes = 0;
        for (int id : ids) bytes += t.bytes_of(id);
        CHECK(bytes == (long)s.size());  // bits per byte divides by exactly the text's bytes
    }
    // Trained words become pieces: far fewer ids than bytes.
    const std::string text = sentences(200, 3);
    CHECK(t.encode(text).size() * 2 < text.size());
}

TEST_CASE("sentencepiece: a text of one long line trains a model (the trainer drops lines over 4 KiB)",
          "[sentencepiece]") {
    std::string one_line = sentences(3000, 1);
    for (char& c : one_line)
        if (c == '\n') c = ' ';
    const auto t = make_sentencepiece_tokenizer(SentencePieceModel::train(one_line, SIZE_MAX, 400, "bpe", 1));
    const std::string text = sentences(200, 3);
    CHECK(t->decode(t->encode(text)) == text);
    CHECK(t->encode(text).size() * 2 < text.size());  // its words were learned
    // No spaces at all, three bytes a character, and the training part cut inside a character:
    // the pieces are cut at characters' starts.
    std::string kana;
    Rng rng(5);
    for (int i = 0; i < 60000; ++i) {
        const char* syllables[] = {"\xE3\x81\x8B", "\xE3\x81\x84", "\xE3\x81\x97", "\xE3\x81\xA6", "\xE3\x82\x93"};
        kana += syllables[i % 7 == 0 ? rng.next() % 5 : i % 3];
    }
    const auto k = make_sentencepiece_tokenizer(SentencePieceModel::train(kana, 100001, 300, "bpe", 1));
    CHECK(k->decode(k->encode(kana.substr(0, 3000))) == kana.substr(0, 3000));
    CHECK(k->encode(kana.substr(0, 3000)).size() < 1000 / 2);  // pieces longer than a character
}

TEST_CASE("sentencepiece: the stored model gives the same tokenizer back", "[sentencepiece]") {
    const Tokenizer& t = trained();
    const TokenizerPtr back = tokenizer_from("sentencepiece", t.table());
    CHECK(back->same_as(t));
    CHECK(back->encode("the rank falls") == t.encode("the rank falls"));
    // What an export writes for Hugging Face: the model, as tokenizer.model.
    const std::vector<TokenizerFile> files = back->hf_files();
    REQUIRE(files.size() == 1);
    CHECK(files[0].name == "tokenizer.model");
    CHECK(files[0].bytes == t.table());
    const auto unigram = make_sentencepiece_tokenizer(SentencePieceModel::train(sentences(3000, 1), SIZE_MAX, 320, "unigram", 1));
    CHECK_FALSE(unigram->same_as(t));
    CHECK(unigram->decode(unigram->encode("the GPU, and  then\n")) == "the GPU, and  then\n");
}

TEST_CASE("sentencepiece: a bad model or bad text gets one line", "[sentencepiece]") {
    CHECK_THROWS_WITH(tokenizer_from("sentencepiece", "not a model"), Catch::Contains("not a SentencePiece model"));
    // A well-formed message whose second piece is empty: the library's trie throws its own
    // exception, which must become the same one line (fuzz_sentencepiece found it).
    const std::string empty_piece("\x0a\x0e\x0a\x05<unk>\x15\0\0\0\0\x18\x02\x0a\x0c\x0a\x03\0 00>\x15\0\0\0\0\x18\x0a",
                                  32);
    CHECK_THROWS_WITH(SentencePieceModel::from_bytes(empty_piece, "x.model"),
                      Catch::Contains("x.model: not a SentencePiece model (") && Catch::Contains("zero-length key"));
    CHECK_THROWS_WITH(SentencePieceModel::load("/nonexistent.model"), Catch::Contains("--sp-model /nonexistent.model: cannot read"));
    CHECK_THROWS_WITH(trained().encode("ab\xFF"), Catch::Contains("not valid UTF-8 at byte 2"));
    CHECK_THROWS_WITH(SentencePieceModel::train("abc\xC3", 2, 300, "bpe", 1), Catch::Contains("not valid UTF-8 at byte 3"));
    CHECK_THROWS_WITH(SentencePieceModel::train("tiny text\n", SIZE_MAX, 5000, "bpe", 1), Catch::Contains("SentencePiece training failed"));
}
