// Incremental decoding on the GPU against its CPU twins: cuda::encoder_decode and
// cuda::attention_decode (grouped-query heads too), and CudaGptDecoder and CudaLlamaDecoder against
// GptDecoder and LlamaDecoder, over a sequence of calls that
// fill two cache slots (a prompt, then one position a call, the two slots in one call, a slot
// started afresh); every output, the caches and the logits compared with the CPU's.
#include "../decode_batching.h"
#include "helpers.h"

#include "dptrain/backend/cpu/ops.h"
#include "dptrain/backend/cuda/gpt.h"
#include "dptrain/backend/cuda/gpt_decoder.h"
#include "dptrain/backend/cuda/llama_decoder.h"
#include "dptrain/core/error.h"
#include "dptrain/model/gpt.h"
#include "dptrain/model/gpt_decoder.h"
#include "dptrain/model/llama.h"

#include <catch2/catch.hpp>

#include <tuple>
#include <utility>
#include <vector>

using namespace dptrain;
using cudatest::DeviceBuffer;
using cudatest::mismatches;
using cudatest::randint;
using cudatest::randn;

namespace {

// The rows of each call, as (slot, position): slot 0's prompt of 10, then slot 1's prompt of 3
// beside slot 0's next position, then one position of each slot a call to the block's end, slot 1
// started again from position 0 for the last four calls.
std::vector<std::vector<std::pair<int, int>>> decode_calls(int T) {
    std::vector<std::vector<std::pair<int, int>>> calls(1);
    for (int p = 0; p < 10; ++p) calls[0].push_back({0, p});
    calls.push_back({{1, 0}, {1, 1}, {1, 2}, {0, 10}});
    for (int p0 = 11; p0 < T; ++p0) calls.push_back({{0, p0}, {1, (p0 - 8) % (T - 12)}});
    return calls;
}

} // namespace

// KV = NH through attention_decode (the GPT's), fewer key/value heads through the grouped form.
TEST_CASE("cuda attention_decode matches the CPU: prompts, single positions, two slots a call, grouped heads",
          "[cuda]") {
    REQUIRE_GPU_OR_SKIP();
    // hs 12 and 32; T > 64; then 6 query heads over 2 and over 1 key/value heads; a Llama's head of
    // 128 over 300 positions (each of the eight warps' shares tens of positions long).
    for (auto [T, NH, KV, hs] : {std::tuple{40, 4, 4, 12}, std::tuple{70, 3, 3, 32}, std::tuple{40, 6, 2, 16},
                                 std::tuple{70, 6, 1, 12}, std::tuple{300, 4, 2, 128}}) {
        INFO("T=" << T << " NH=" << NH << " KV=" << KV << " hs=" << hs);
        const int slots = 2, W = (NH + 2 * KV) * hs, C = NH * hs;
        const size_t cache = (size_t)slots * T * KV * hs;
        std::vector<float> kc(cache, 0.0f), vc(cache, 0.0f);
        DeviceBuffer<float> d_kc(kc), d_vc(vc);
        cudaStream_t stream = nullptr;
        REQUIRE(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess);
        uint64_t seed = 4100;
        int bad = 0;
        for (const auto& call : decode_calls(T)) {
            const int n = (int)call.size();
            std::vector<int> slot, pos;
            for (auto [s, p] : call) slot.push_back(s), pos.push_back(p);
            const auto qkv = randn((size_t)n * W, seed++);
            std::vector<float> out((size_t)n * C);
            cpu::attention_decode_grouped(out.data(), kc.data(), vc.data(), qkv.data(), slot.data(), pos.data(), n, T,
                                          NH, KV, hs);
            DeviceBuffer<float> d_qkv(qkv), d_out(std::vector<float>((size_t)n * C, -7.0f));
            DeviceBuffer<int> d_slot(slot), d_pos(pos);
            if (KV == NH) cuda::attention_decode(d_out, d_kc, d_vc, d_qkv, d_slot, d_pos, n, T, C, NH, stream);
            else cuda::attention_decode_grouped(d_out, d_kc, d_vc, d_qkv, d_slot, d_pos, n, T, NH, KV, hs, stream);
            // The scores are hs-term dot products (lanes' strided sums joined by a warp's tree; the
            // CPU's in SIMD lanes, then across them), exp is the GPU's expf (2 ulp) against the CPU's
            // exp_approx (2e-7), the softmax's sums add in the block's tree, and the output sums
            // eight contiguous shares of the positions, then the shares in order: ~1e-6 on values
            // ~1; 1e-5 (1 + |x|). A wrong position, slot, head offset, group, share or scale moves
            // an output by ~1e-1.
            bad += mismatches("out", d_out.get(), out, 1e-5, 1e-5);
        }
        CHECK(bad == 0);
        // The caches hold the rows' k and v copied, bit for bit.
        CHECK(cudatest::bit_mismatches("kcache", d_kc.get(), kc) == 0);
        CHECK(cudatest::bit_mismatches("vcache", d_vc.get(), vc) == 0);
        cudaStreamDestroy(stream);
    }
}

TEST_CASE("cuda encoder_decode matches the CPU bit for bit", "[cuda]") {
    REQUIRE_GPU_OR_SKIP();
    const int V = 37, T = 20, C = 24, n = 9;
    const auto wte = randn((size_t)V * C, 4200), wpe = randn((size_t)T * C, 4201);
    const auto tok = randint(n, 4202, V), pos = randint(n, 4203, T);
    std::vector<float> out((size_t)n * C);
    cpu::encoder_decode(out.data(), tok.data(), pos.data(), wte.data(), wpe.data(), n, C);
    DeviceBuffer<float> d_wte(wte), d_wpe(wpe), d_out((size_t)n * C);
    DeviceBuffer<int> d_tok(tok), d_pos(pos);
    cuda::encoder_decode(d_out, d_tok, d_pos, d_wte, d_wpe, n, C, nullptr);
    CHECK(cudatest::bit_mismatches("encoder_decode", d_out.get(), out) == 0);  // one add a value
}

namespace {

// The decoder tests' models: a GPT, and a Llama of the same size with 2 key/value heads per 4
// query heads, an untied head and theta 500 (positions turn every pair visibly).
GptConfig as_arch(GptConfig c, DecoderArch arch) {
    c.arch = arch;
    if (arch == DecoderArch::llama) {
        c.n_kv_head = 2;
        c.tie_embeddings = false;
        c.rope_theta = 500.0f;
    }
    return c;
}

std::vector<float> init_params(const GptConfig& c, uint64_t seed, float noise = 0.0f) {
    const auto m = make_cpu_lm(c, 0);
    std::vector<float> p(m->num_params());
    m->init(p.data(), seed);
    if (noise > 0) {  // logits far from uniform
        const auto r = randn(p.size(), seed + 100, noise);
        for (size_t i = 0; i < p.size(); ++i) p[i] += r[i];
    }
    return p;
}

void decoder_against_cpu(const GptConfig& cfg) {
    const auto cpu_model = make_cpu_decoder(cfg);
    const auto gpu_model = make_cuda_decoder(cfg, 0);  // as generate and serve make it
    if (cfg.arch == DecoderArch::llama) CHECK(dynamic_cast<CudaLlamaDecoder*>(gpu_model.get()) != nullptr);
    else CHECK(dynamic_cast<CudaGptDecoder*>(gpu_model.get()) != nullptr);
    const std::vector<float> params = init_params(cfg, 42);
    const int slots = 2, rows = 16;
    cpu_model->reserve(slots, rows);
    gpu_model->reserve(slots, rows);
    cpu_model->set_params(params.data());
    gpu_model->set_params(params.data());
    const int V = cfg.vocab_size;
    uint64_t seed = 4300;
    int bad = 0, calls = 0;
    for (const auto& call : decode_calls(cfg.block_size)) {
        const int n = (int)call.size();
        std::vector<int> slot, pos;
        for (auto [sl, p] : call) slot.push_back(sl), pos.push_back(p);
        const auto tok = randint(n, seed++, V);
        // The prompts' calls ask for one row's logits (a prompt's last), the others for every row's.
        const std::vector<int> last = {n - 1};
        const int* out_rows = n > 2 ? last.data() : nullptr;
        const int m = out_rows ? 1 : n;
        std::vector<float> want((size_t)m * V), got((size_t)m * V, -1.0f);
        cpu_model->decode(tok.data(), slot.data(), pos.data(), n, want.data(), out_rows, out_rows ? 1 : 0);
        gpu_model->decode(tok.data(), slot.data(), pos.data(), n, got.data(), out_rows, out_rows ? 1 : 0);
        // Two layers of fp32 GEMMs (cuBLAS against OpenBLAS: other summation orders, ~1e-6
        // relative each), the norms and the attention's softmax (attention_decode's tolerance):
        // the CPU model's forward test allows 1e-5 on the loss; logits ~1 here, 1e-4 (1 + |x|). A
        // cache written at a wrong place, a stale position or a wrong rotation moves logits by ~1e-1.
        bad += mismatches("logits", got, want, 1e-4, 1e-4);
        ++calls;
    }
    INFO(calls << " calls");
    CHECK(bad == 0);
    const int bad_tok = V, zero = 0;
    std::vector<float> logits(V);
    CHECK_THROWS_WITH(gpu_model->decode(&bad_tok, &zero, &zero, 1, logits.data()),
                      Catch::Contains("token 67 outside the model's vocabulary of 67"));
    const int late = cfg.block_size;
    CHECK_THROWS_AS(gpu_model->decode(&zero, &zero, &late, 1, logits.data()), std::invalid_argument);
}

} // namespace

TEST_CASE("CudaGptDecoder and CudaLlamaDecoder give the CPU decoders' logits, call after call, and refuse what "
          "the CPU refuses",
          "[cuda]") {
    REQUIRE_GPU_OR_SKIP();
    GptConfig cfg;
    cfg.vocab_size = 67;
    cfg.block_size = 24;
    cfg.n_layer = 2;
    cfg.n_head = 4;
    cfg.n_embd = 48;
    SECTION("gpt") { decoder_against_cpu(as_arch(cfg, DecoderArch::gpt2)); }
    SECTION("llama") { decoder_against_cpu(as_arch(cfg, DecoderArch::llama)); }
}

// As on the CPU (tests/unit/test_decode.cpp, the same check): a sequence's logits are the same
// bits alone and batched with other sequences' rows, its prompt among short or long ones. Short
// runs go through matmul_forward_rows, a prompt of kDecodePromptRows or more through one
// cuBLAS call of its own. 264 wide (not a multiple of the warp's 32 lanes) and 515 tokens: wider
// than the CPU test's 36, whose sums might fit one cuBLAS tile whatever the rows; whether one
// cuBLAS product over all of a call's rows fails this test is still to be seen on a GPU.
TEST_CASE("The GPU decoders: a row's logits are the same bits alone or among other sequences' rows", "[cuda]") {
    REQUIRE_GPU_OR_SKIP();
    for (DecoderArch arch : {DecoderArch::gpt2, DecoderArch::llama}) {
        INFO((arch == DecoderArch::llama ? "llama" : "gpt"));
        auto differ = [arch](int prompt, int fellow, int T) {
            GptConfig c;
            c.vocab_size = 515;
            c.block_size = T;
            c.n_layer = 2;
            c.n_head = 4;
            c.n_embd = 264;
            c = as_arch(c, arch);
            const std::vector<float> p = init_params(c, 13, 0.2f);
            const auto d = make_cuda_decoder(c, 0);
            d->set_params(p.data());
            return decode_batching::rows_batched_differently(*d, c.vocab_size, T, prompt, fellow);
        };
        CHECK(differ(3, 2, 16) == 0);  // a prompt of 3, beside prompts of 2
        CHECK(differ(kDecodePromptRows + 5, kDecodePromptRows, kDecodePromptRows + 13) == 0);  // long beside long
        CHECK(differ(kDecodePromptRows, 3, kDecodePromptRows + 8) == 0);  // a long prompt beside short ones
    }
}

// --precision bf16 on the GPU: the CPU's bf16 decoder's logits (within the fp32 test's tolerance:
// other summation orders on the same rounded weights) for a prompt long enough for its cuBLAS
// call on the widened matrices, then a token a call; a second parameter set rounded anew (a
// rollout); batched as alone.
TEST_CASE("The GPU decoders with bf16 weights: the CPU's bf16 logits, batched as alone", "[cuda]") {
    REQUIRE_GPU_OR_SKIP();
    for (DecoderArch arch : {DecoderArch::gpt2, DecoderArch::llama}) {
        INFO((arch == DecoderArch::llama ? "llama" : "gpt"));
        GptConfig c;
        c.vocab_size = 515;
        c.block_size = kDecodePromptRows + 8;
        c.n_layer = 2;
        c.n_head = 4;
        c.n_embd = 264;
        c = as_arch(c, arch);
        const int V = c.vocab_size, T = c.block_size;
        const auto gpu = make_cuda_decoder(c, 0, Precision::bf16);
        const auto cpu16 = make_cpu_decoder(c, Precision::bf16);
        CHECK(gpu->where() == "GPU 0, bf16 weights");
        gpu->reserve(1, T);
        cpu16->reserve(1, T);
        int bad = 0;
        for (uint64_t seed : {31, 32}) {
            const std::vector<float> p = init_params(c, seed, 0.2f);
            gpu->set_params(p.data());
            cpu16->set_params(p.data());
            std::vector<int> tok(T), slot(T, 0), pos(T);
            for (int t = 0; t < T; ++t) tok[t] = (t * 5 + (int)seed) % V, pos[t] = t;
            for (int t = 0, n = kDecodePromptRows + 1; t < T; t += n, n = 1) {
                std::vector<float> want((size_t)n * V), got((size_t)n * V, -1.0f);
                cpu16->decode(&tok[t], slot.data(), &pos[t], n, want.data());
                gpu->decode(&tok[t], slot.data(), &pos[t], n, got.data());
                bad += mismatches("logits (bf16 weights)", got, want, 1e-4, 1e-4);
            }
            CHECK(bad == 0);  // p stays alive through the calls: the CPU decoder reads it
        }
        const std::vector<float> p = init_params(c, 13);
        const auto d = make_cuda_decoder(c, 0, Precision::bf16);
        d->set_params(p.data());
        CHECK(decode_batching::rows_batched_differently(*d, V, T, kDecodePromptRows, 3) == 0);
    }
}

// Decoding is CudaGptDecoder's alone: a CudaGpt refuses to be made without a batch, and the decoder
// (parameters and cache, no training buffers) takes less device memory than a model made for one
// window.
TEST_CASE("CudaGptDecoder takes less memory than training's model, which needs a batch", "[cuda]") {
    REQUIRE_GPU_OR_SKIP();
    GptConfig cfg;
    cfg.vocab_size = 64;
    cfg.block_size = 256;
    cfg.n_layer = 2;
    cfg.n_head = 4;
    cfg.n_embd = 64;
    CHECK_THROWS_AS(CudaGpt(cfg, 0, 0), std::invalid_argument);
    auto used = [] {
        size_t free_bytes = 0, total = 0;
        REQUIRE(cudaMemGetInfo(&free_bytes, &total) == cudaSuccess);
        return total - free_bytes;
    };
    const size_t before = used();
    size_t decoding = 0, training = 0;
    {
        CudaGptDecoder d(cfg, 0);
        d.reserve(1, 1);
        decoding = used() - before;
    }
    {
        CudaGpt m(cfg, 1, 0);
        training = used() - before;
    }
    INFO("device memory: " << decoding << " bytes for decoding, " << training << " for one window of training");
    CHECK(decoding < training);
}
