// safetensors (round trips, every refusal of the reader, half and bf16 widening) and the GPT in
// Hugging Face's GPT-2 layout (names, orientation, export -> import, the checks of an import).
#include "helpers.h"

#include "dptrain/core/bf16.h"
#include "dptrain/core/error.h"
#include "dptrain/io/hf_gpt2.h"
#include "dptrain/io/safetensors.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <fstream>

using namespace dptrain;

namespace {

// A file image: header JSON and data bytes, with the 8-byte length in front.
std::string image(const std::string& header, const std::string& data) {
    std::string out(8, '\0');
    for (int i = 0; i < 8; ++i) out[i] = (char)((uint64_t)header.size() >> (8 * i));
    return out + header + data;
}

std::string read_all(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
}

void refused(const std::string& bytes, const std::string& want) {
    try {
        Safetensors::parse(bytes, "f.safetensors");
        FAIL("parsed, but wanted: " << want);
    } catch (const UserError& e) {
        INFO(e.what());
        CHECK(std::string(e.what()).rfind("f.safetensors: ", 0) == 0);
        CHECK(std::string(e.what()).find(want) != std::string::npos);
    }
}

CheckpointState gpt_checkpoint(const GptConfig& cfg) {
    Gpt gpt(cfg, 0);
    CheckpointState ck;
    ck.step = 7;
    ck.model = gpt.signature();
    ck.tokenizer = "char";
    ck.vocab = "abcdefghijk";
    ck.params = testing::randn(gpt.num_params(), 99);
    return ck;
}

GptConfig small_config() {
    GptConfig c;
    c.vocab_size = 11;
    c.block_size = 8;
    c.n_layer = 2;
    c.n_head = 2;
    c.n_embd = 8;
    return c;
}

} // namespace

TEST_CASE("safetensors: float32 and bf16 round trips keep names, shapes, order and metadata") {
    const std::string dir = testing::temp_dir("st");
    std::vector<TensorOut> t = {{"b", {2, 3}, {1, -2, 3.5f, 1e-3f, -0.f, 65504}}, {"a", {}, {0.1f}}};
    write_safetensors(dir + "/x.safetensors", t, {{"format", "pt"}, {"k", "v é"}}, TensorDtype::f32);
    Safetensors s = Safetensors::read_file(dir + "/x.safetensors");
    REQUIRE(s.tensors().size() == 2);
    CHECK(s.tensors()[0].name == "b");  // written order
    CHECK(s.tensors()[0].shape == std::vector<int64_t>{2, 3});
    CHECK(s.tensors()[1].shape.empty());
    CHECK(s.metadata().at("k") == "v é");
    std::vector<float> out(6);
    s.to_float(*s.find("b"), out.data());
    CHECK(std::memcmp(out.data(), t[0].data.data(), 24) == 0);
    // bf16: each value rounded to nearest even, then widened exactly.
    write_safetensors(dir + "/y.safetensors", t, {}, TensorDtype::bf16);
    Safetensors h = Safetensors::read_file(dir + "/y.safetensors");
    CHECK(h.find("b")->dtype == "BF16");
    h.to_float(*h.find("b"), out.data());
    for (int i = 0; i < 6; ++i) CHECK(out[i] == bf16_to_float(float_to_bf16(t[0].data[i])));
    CHECK(out[2] == 3.5f);
    CHECK(out[5] == 65536.0f);  // 65504 is not a bf16: rounds up
    // The data section starts 8-byte aligned.
    const std::string raw = read_all(dir + "/y.safetensors");
    uint64_t n = 0;
    std::memcpy(&n, raw.data(), 8);
    CHECK((8 + n) % 8 == 0);
    CHECK(raw.size() == 8 + n + 7 * 2);
}

TEST_CASE("safetensors: F16 and F64 are widened or rounded to float32") {
    // 1.0, -2.0, the smallest subnormal 2^-24, +inf, 65504 (largest half).
    const uint16_t halves[] = {0x3C00, 0xC000, 0x0001, 0x7C00, 0x7BFF};
    std::string data((const char*)halves, sizeof halves);
    const double d[] = {0.1, -1e300};
    data.append((const char*)d, sizeof d);
    Safetensors s = Safetensors::parse(
        image("{\"h\":{\"dtype\":\"F16\",\"shape\":[5],\"data_offsets\":[0,10]},"
              "\"d\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[10,26]}}",
              data),
        "f");
    float out[5];
    s.to_float(*s.find("h"), out);
    CHECK(out[0] == 1.0f);
    CHECK(out[1] == -2.0f);
    CHECK(out[2] == std::ldexp(1.0f, -24));
    CHECK(std::isinf(out[3]));
    CHECK(out[4] == 65504.0f);
    s.to_float(*s.find("d"), out);
    CHECK(out[0] == 0.1f);
    CHECK(std::isinf(out[1]));
    // Integer tensors are listed, but not read as weights.
    Safetensors i = Safetensors::parse(image("{\"i\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]}}",
                                             std::string(8, '\0')),
                                       "f");
    CHECK_THROWS_WITH(i.to_float(i.tensors()[0], out), Catch::Contains("tensor 'i' is I64"));
}

TEST_CASE("safetensors: every malformed file is refused with what is wrong") {
    const std::string ok_entry = "{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
    REQUIRE_NOTHROW(Safetensors::parse(image(ok_entry, std::string(8, '\0')), "f"));
    refused("short", "shorter than the 8-byte header length");
    refused(image(ok_entry, std::string(8, '\0')).substr(0, 20), "exceeds the file");
    refused(image("{\"t\":", ""), "not valid JSON");
    refused(image("[1,2]", ""), "not a JSON object");
    refused(image(ok_entry, std::string(4, '\0')), "outside the 4 bytes of data");
    refused(image("{\"t\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", std::string(8, '\0')),
            "holds 8 bytes, but F32 of shape [3] needs 12");
    refused(image("{\"t\":{\"dtype\":\"Q4\",\"shape\":[2],\"data_offsets\":[0,8]}}", std::string(8, '\0')),
            "unknown dtype 'Q4'");
    refused(image("{\"t\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", std::string(8, '\0')),
            "shape must be a non-negative integer");
    refused(image("{\"t\":{\"dtype\":\"F32\",\"shape\":[2]}}", std::string(8, '\0')), "needs \"dtype\"");
    refused(image("{\"t\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,8]}}",
                  std::string(8, '\0')),
            "shape is too large");
    refused(image("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                  "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                  std::string(8, '\0')),
            "tensors 'a' and 'b' overlap");
    refused(image("{\"__metadata__\":{\"k\":1}}", ""), "__metadata__ 'k' is not a string");
}

TEST_CASE("hf_gpt2: dptrain's names map to GPT-2's, Conv1D matrices transposed") {
    bool tr = false;
    CHECK(hf_gpt2_name("wte", &tr) == "wte.weight");
    CHECK(!tr);
    CHECK(hf_gpt2_name("h11.attn.qkv.weight", &tr) == "h.11.attn.c_attn.weight");
    CHECK(tr);
    CHECK(hf_gpt2_name("h0.mlp.proj.bias", &tr) == "h.0.mlp.c_proj.bias");
    CHECK(!tr);
    CHECK(hf_gpt2_name("h3.ln2.weight", &tr) == "h.3.ln_2.weight");
    CHECK(hf_gpt2_name("lnf.bias", &tr) == "ln_f.bias");
    CHECK_THROWS(hf_gpt2_name("fc0.weight", &tr));
}

TEST_CASE("hf_gpt2: export then import gives back every parameter exactly; the matrices are stored (in, out)") {
    const GptConfig cfg = small_config();
    const CheckpointState ck = gpt_checkpoint(cfg);
    const std::string dir = testing::temp_dir("hf");
    export_hf_gpt2(ck, dir, TensorDtype::f32);
    Gpt gpt(cfg, 0);
    // h.1.mlp.c_fc.weight is (C, 4C): element (i, o) is dptrain's (o, i).
    Safetensors st = Safetensors::read_file(dir + "/model.safetensors");
    const SafeTensor* fc = st.find("h.1.mlp.c_fc.weight");
    REQUIRE(fc);
    CHECK(fc->shape == std::vector<int64_t>{8, 32});
    std::vector<float> m(fc->count());
    st.to_float(*fc, m.data());
    const float* ours = ck.params.data() + gpt.layout().find("h1.mlp.fc.weight").offset;  // (32, 8)
    CHECK(m[3 * 32 + 17] == ours[17 * 8 + 3]);
    CHECK(st.metadata().at("dptrain.step") == "7");

    std::vector<float> back(gpt.num_params(), -1.0f);
    std::string note;
    import_hf_gpt2(dir, cfg, back.data(), &note);
    CHECK(std::memcmp(back.data(), ck.params.data(), back.size() * 4) == 0);
    CHECK(note.empty());
    // A shorter block: the first rows of the position table.
    GptConfig short_cfg = cfg;
    short_cfg.block_size = 4;
    Gpt shorter(short_cfg, 0);
    std::vector<float> cropped(shorter.num_params());
    import_hf_gpt2(dir + "/model.safetensors", short_cfg, cropped.data(), &note);
    CHECK(note == "position table cropped from 8 to --block-size 4");
    const size_t wpe = gpt.layout().find("wpe").offset;
    CHECK(std::memcmp(cropped.data() + shorter.layout().find("wpe").offset, ck.params.data() + wpe, 4 * 8 * 4) == 0);
    CHECK(cropped.back() == ck.params.back());
}

TEST_CASE("hf_gpt2: an import that does not fit the run says what differs") {
    const GptConfig cfg = small_config();
    const std::string dir = testing::temp_dir("hfbad");
    export_hf_gpt2(gpt_checkpoint(cfg), dir, TensorDtype::bf16);
    std::vector<float> p(1 << 16);
    std::string note;
    auto refuses = [&](GptConfig c, const std::string& want) {
        CHECK_THROWS_WITH(import_hf_gpt2(dir, c, p.data(), &note), Catch::Contains(want));
    };
    GptConfig c = cfg;
    c.n_layer = 3;
    refuses(c, "the model has 2 layers; this run has --n-layer 3");
    c = cfg;
    c.vocab_size = 12;
    refuses(c, "the model's vocabulary is 11 (wte 11 x 8), this run's is 12");
    c = cfg;
    c.n_head = 4;
    refuses(c, "the model has n_head 2; this run has --n-head 4");
    c = cfg;
    c.block_size = 9;
    refuses(c, "the model has 8 positions; --block-size 9 needs as many");
    c = cfg;
    c.n_embd = 16;
    refuses(c, "the model has n_embd 8; this run has --n-embd 16");
    // config.json says what the model computes: another activation is refused by name.
    std::string conf = read_all(dir + "/config.json");
    const std::string good = conf;
    conf.replace(conf.find("gelu_new"), 8, "relu");
    std::ofstream(dir + "/config.json") << conf;
    refuses(cfg, "activation_function \"relu\"");
    std::ofstream(dir + "/config.json") << good;
    // Without config.json the shapes decide, and n_head is taken from the run.
    std::remove((dir + "/config.json").c_str());
    import_hf_gpt2(dir, cfg, p.data(), &note);
    CHECK(note == "no config.json beside it: --n-head 2 assumed");
}

TEST_CASE("hf_gpt2: a tied lm_head and mask buffers are accepted, an untied head and strangers are not") {
    const GptConfig cfg = small_config();
    const CheckpointState ck = gpt_checkpoint(cfg);
    const std::string dir = testing::temp_dir("hfhead");
    export_hf_gpt2(ck, dir, TensorDtype::f32);
    Safetensors st = Safetensors::read_file(dir + "/model.safetensors");
    std::vector<TensorOut> t;
    for (const SafeTensor& s : st.tensors()) {
        TensorOut o{"transformer." + s.name, s.shape, std::vector<float>(s.count())};
        st.to_float(s, o.data.data());
        t.push_back(o);
    }
    Gpt gpt(cfg, 0);
    const float* wte = ck.params.data();
    t.push_back({"lm_head.weight", {11, 8}, std::vector<float>(wte, wte + 88)});
    t.push_back({"transformer.h.0.attn.bias", {1, 1, 8, 8}, std::vector<float>(64, 1.0f)});
    write_safetensors(dir + "/model.safetensors", t, {}, TensorDtype::f32);
    std::vector<float> back(gpt.num_params());
    std::string note;
    import_hf_gpt2(dir, cfg, back.data(), &note);
    CHECK(std::memcmp(back.data(), ck.params.data(), back.size() * 4) == 0);

    t[t.size() - 2].data[5] += 1.0f;  // the head no longer equals wte
    write_safetensors(dir + "/model.safetensors", t, {}, TensorDtype::f32);
    CHECK_THROWS_WITH(import_hf_gpt2(dir, cfg, back.data(), &note), Catch::Contains("lm_head.weight differs"));
    t[t.size() - 2].data[5] -= 1.0f;
    t.push_back({"transformer.h.2.ln_1.gain", {8}, std::vector<float>(8)});
    write_safetensors(dir + "/model.safetensors", t, {}, TensorDtype::f32);
    CHECK_THROWS_WITH(import_hf_gpt2(dir, cfg, back.data(), &note),
                      Catch::Contains("tensor transformer.h.2.ln_1.gain is not part of a GPT-2 of 2 layers"));
    t.pop_back();
    t.erase(t.begin() + 3);  // a tensor missing
    write_safetensors(dir + "/model.safetensors", t, {}, TensorDtype::f32);
    CHECK_THROWS_WITH(import_hf_gpt2(dir, cfg, back.data(), &note), Catch::Contains("is missing"));
}

TEST_CASE("hf_gpt2: export refuses a directory that holds files; --overwrite removes another tokenizer's files") {
    const GptConfig cfg = small_config();
    const CheckpointState ck = gpt_checkpoint(cfg);  // char: no tokenizer file of its own
    const std::string dir = testing::temp_dir("hfover");
    std::ofstream(dir + "/notes.txt") << "mine\n";
    CHECK_THROWS_WITH(export_hf_gpt2(ck, dir, TensorDtype::f32),
                      Catch::Contains("already holds 1 file (notes.txt); export into a new directory, or replace the "
                                      "model there with --overwrite"));
    CHECK(!std::ifstream(dir + "/model.safetensors").good());
    // Another export's GPT-2 tokenizer files would be loaded with this char model.
    std::ofstream(dir + "/vocab.json") << "{}\n";
    std::ofstream(dir + "/merges.txt") << "#version: 0.2\n";
    const std::vector<std::string> removed = export_hf_gpt2(ck, dir, TensorDtype::f32, true);
    CHECK(removed == std::vector<std::string>{"vocab.json", "merges.txt"});
    CHECK(!std::ifstream(dir + "/vocab.json").good());
    CHECK(std::ifstream(dir + "/notes.txt").good());  // not a tokenizer file: kept
    const std::string conf = read_all(dir + "/config.json");
    // GPT2Config's default ids (50256) lie outside a char vocabulary: written as null.
    CHECK(conf.find("\"eos_token_id\": null") != std::string::npos);
}

TEST_CASE("hf_gpt2: a config.json that disagrees with its tensors, another attention, another tokenizer: refused") {
    const GptConfig cfg = small_config();
    const std::string dir = testing::temp_dir("hfcheck");
    export_hf_gpt2(gpt_checkpoint(cfg), dir, TensorDtype::f32);
    std::vector<float> p(Gpt(cfg, 0).num_params());
    std::string note;
    const std::string good = read_all(dir + "/config.json");
    auto edited = [&](const std::string& from, const std::string& to) {
        std::string c = good;
        REQUIRE(c.find(from) != std::string::npos);
        c.replace(c.find(from), from.size(), to);
        std::ofstream(dir + "/config.json") << c;
    };
    // The run has 2 layers, as the tensors do; config.json's 3 is the odd one out.
    edited("\"n_layer\": 2", "\"n_layer\": 3");
    CHECK_THROWS_WITH(import_hf_gpt2(dir, cfg, p.data(), &note),
                      Catch::Contains("config.json says n_layer 3, but the tensors hold 2 layers"));
    edited("\"n_layer\": 2", "\"n_layer\": 2, \"scale_attn_by_inverse_layer_idx\": true");
    CHECK_THROWS_WITH(import_hf_gpt2(dir, cfg, p.data(), &note),
                      Catch::Contains("scale_attn_by_inverse_layer_idx is true"));
    edited("\"n_layer\": 2", "\"n_layer\": 2, \"scale_attn_weights\": false");
    CHECK_THROWS_WITH(import_hf_gpt2(dir, cfg, p.data(), &note), Catch::Contains("scale_attn_weights is false"));
    std::ofstream(dir + "/config.json") << good;
    // The same 11 ids, other characters; another kind of tokens; the model's own.
    CHECK_THROWS_WITH(import_hf_gpt2(dir, cfg, p.data(), &note, {"char", "abcdefghijz"}),
                      Catch::Contains("trained on char tokens, the run's data holds char tokens of another table"));
    CHECK_THROWS_WITH(import_hf_gpt2(dir, cfg, p.data(), &note, {"sentencepiece", "x"}),
                      Catch::Contains("trained on char tokens, the run's data holds sentencepiece tokens:"));
    // Ids that name no tokenizer (nanoGPT's .bin files through dptrain-data tokens) are taken as
    // the model's, with a note.
    import_hf_gpt2(dir, cfg, p.data(), &note, {"ids", "11"});
    CHECK(note == "the data's ids, which name no tokenizer, taken as the model's char ids");
    import_hf_gpt2(dir, cfg, p.data(), &note, {"char", "abcdefghijk"});
    import_hf_gpt2(dir, cfg, p.data(), &note);  // a run without a tokenizer to compare: not checked
}

TEST_CASE("hf_gpt2: export refuses a checkpoint that is not a GPT") {
    CheckpointState ck;
    ck.model = "mlp in=3 hidden=4 classes=2 act=relu";
    ck.params.assign(26, 0.0f);
    CHECK_THROWS_WITH(export_hf_gpt2(ck, testing::temp_dir("hfmlp"), TensorDtype::f32),
                      Catch::Contains("export writes GPT-2's or Llama's layout, for --model gpt or llama checkpoints"));
    GptConfig c;
    CHECK(parse_gpt_signature("gpt V=65 T=64 L=4 H=4 C=128", &c));
    CHECK((c.vocab_size == 65 && c.block_size == 64 && c.n_layer == 4 && c.n_head == 4 && c.n_embd == 128));
    CHECK(!parse_gpt_signature("gpt V=65 T=64 L=4 H=4 C=128 extra", &c));
    CHECK(!parse_gpt_signature(ck.model, &c));
}
