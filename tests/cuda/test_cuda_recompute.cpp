// --recompute on the GPU: CudaGpt keeping one shared slot of the activations backward recomputes
// (block: everything of a block but its input; attention: the softmax or flash attention's
// statistics) against CudaGpt keeping them all. Backward runs the same ops on the same values in
// the same order, so the loss and every gradient must be the same bits, as on the CPU
// (tests/unit: Gpt with --recompute). Three layers, so that a layer's backward that read another
// layer's recomputed slot would show, and two batches one after the other, so that what the first
// left in the shared slot cannot stand in for the second's.
#include "helpers.h"

#include "dptrain/backend/cuda/gpt.h"
#include "dptrain/backend/gpu_sizes.h"

#include <cmath>
#include <string>

using namespace dptrain;
using namespace cudatest;

namespace {

// The slots of the kept activations start on 256-byte boundaries in both models (B T C a
// multiple of 128 values), so cuBLASLt sees operands of the same alignment and picks the same
// algorithms: a different algorithm could sum in another order, which is not what is tested.
GptConfig three_layers(bool flash, Recompute r) {
    GptConfig cfg;
    cfg.vocab_size = 57;
    cfg.block_size = 16;
    cfg.n_layer = 3;
    cfg.n_head = flash ? 2 : 4;  // flash: head size 16
    cfg.n_embd = 32;
    cfg.flash_attention = flash;
    cfg.recompute = r;
    return cfg;
}

// 4 layers of 4 heads, block size 256: activations of tens to hundreds of MiB, where the memory
// tests below measure.
GptConfig four_layers(int C, int V, Recompute r, bool flash = false) {
    GptConfig cfg;
    cfg.vocab_size = V;
    cfg.block_size = 256;
    cfg.n_layer = 4;
    cfg.n_head = 4;
    cfg.n_embd = C;
    cfg.recompute = r;
    cfg.flash_attention = flash;
    return cfg;
}

// The device bytes making a CudaGpt for B windows takes (cudaMemGetInfo before and after; the
// model is freed again on return).
double device_bytes_taken(const GptConfig& cfg, int B, Precision p = Precision::fp32) {
    size_t free0 = 0, free1 = 0, total = 0;
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    REQUIRE(cudaMemGetInfo(&free0, &total) == cudaSuccess);
    CudaGpt m(cfg, B, 0, p);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    REQUIRE(cudaMemGetInfo(&free1, &total) == cudaSuccess);
    return (double)free0 - (double)free1;
}

std::vector<float> backward_grads(CudaGpt& m, const std::vector<float>& p, const ModelBatch& in, double* loss) {
    const size_t P = p.size();
    std::vector<float> g(P, 0.0f);
    REQUIRE(cudaMemset(m.device_grads(), 0xFF, P * sizeof(float)) == cudaSuccess);  // written, not left
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    *loss = m.forward(p.data(), in, nullptr);
    m.backward(g.data(), p.data(), in, 1.0f / (in.B * 16), nullptr);
    return g;
}

const char* name_of_mode(Recompute r) { return r == Recompute::block ? "block" : "attention"; }

} // namespace

TEST_CASE("CudaGpt with --recompute gives the bits of keeping every activation", "[cuda]") {
    REQUIRE_GPU_OR_SKIP();
    struct Form {
        Precision prec;
        bool flash;
    };
    const int B = 4, T = 16;
    std::vector<std::vector<int>> tokens = {randint((size_t)B * (T + 1), 71, 57), randint((size_t)B * (T + 1), 72, 57)};
    for (Form f : {Form{Precision::fp32, false}, Form{Precision::bf16, false}, Form{Precision::bf16, true}}) {
        for (Recompute r : {Recompute::attention, Recompute::block}) {
            INFO((f.prec == Precision::bf16 ? "bf16" : "fp32") << (f.flash ? ", flash attention" : "")
                                                               << ", --recompute " << name_of_mode(r));
            CudaGpt keep(three_layers(f.flash, Recompute::none), B, 0, f.prec);
            CudaGpt again(three_layers(f.flash, r), B, 0, f.prec);
            const size_t P = keep.num_params();
            std::vector<float> p(P);
            keep.init(p.data(), 13);
            for (size_t k = 0; k < tokens.size(); ++k) {
                INFO("batch " << k);
                ModelBatch in;
                in.B = B;
                in.tokens = tokens[k].data();
                in.stride = T + 1;
                double la = 0, lb = 0;
                const std::vector<float> ga = backward_grads(keep, p, in, &la);
                const std::vector<float> gb = backward_grads(again, p, in, &lb);
                CHECK(la == lb);
                CHECK(bit_mismatches("gradients", gb, ga) == 0);
            }
        }
    }
}

// What recomputation is for: less device memory. The device memory in use with each model made (and
// freed before the next): attention drops L - 1 of the L softmax slots (8 MiB each here), block
// also L - 1 slots of each block's activations (about 16 MiB each).
TEST_CASE("CudaGpt with --recompute allocates less device memory: attention less, block least", "[cuda]") {
    REQUIRE_GPU_OR_SKIP();
    auto used_by = [](Recompute r) { return (size_t)device_bytes_taken(four_layers(128, 64, r), 8); };
    const size_t none = used_by(Recompute::none), attention = used_by(Recompute::attention),
                 block = used_by(Recompute::block);
    INFO("device bytes: none " << none << ", attention " << attention << ", block " << block);
    CHECK(attention + (16u << 20) <= none);
    CHECK(block + (32u << 20) <= attention);
}

// What the banner's activations line reports on a GPU: in fp32 the CPU model's formula exactly (the
// same buffers, the same sizes), for each --recompute and with flash attention; in bf16 less, and
// in both the plan's GPU formula (backend/gpu_sizes.h) exactly.
TEST_CASE("CudaGpt reports the activation bytes it allocated: the CPU formula's in fp32", "[cuda]") {
    REQUIRE_GPU_OR_SKIP();
    for (bool flash : {false, true})
        for (Recompute r : {Recompute::none, Recompute::attention, Recompute::block}) {
            const GptConfig cfg = three_layers(flash, r);
            INFO((flash ? "flash attention" : "matmul attention") << ", --recompute "
                                                                  << (r == Recompute::none ? "none" : name_of_mode(r)));
            CudaGpt m(cfg, 4, 0);
            CHECK(m.activation_bytes() == Gpt::activation_bytes(cfg, 4));
            CHECK(m.activation_bytes() == gpu_gpt_activation_bytes(cfg, 4, Precision::fp32));
            m.set_precision(Precision::bf16);
            CHECK(m.activation_bytes() < Gpt::activation_bytes(cfg, 4));
            CHECK(m.activation_bytes() == gpu_gpt_activation_bytes(cfg, 4, Precision::bf16));
        }
}

// The plan's GPU part against the device: what a bf16 CudaGpt for 16 windows takes from
// cudaMemGetInfo beyond one for 8 is the formulas' activations and bf16 operands of 8 windows more
// (and two input slots' rows). The difference cancels what does not grow with the batch (the
// context, cuBLAS's workspace, the parameters); the rest (allocation granularity, the reduction
// scratch) within 5% at activations of a few hundred MiB.
TEST_CASE("CudaGpt in bf16 takes from the device what the memory plan's formulas say", "[cuda]") {
    REQUIRE_GPU_OR_SKIP();
    // A model made and freed first: what the first one loads and keeps (cuBLAS's modules, say)
    // falls outside the measurements.
    device_bytes_taken(four_layers(256, 1000, Recompute::none), 1, Precision::bf16);
    for (bool flash : {false, true}) {
        const GptConfig cfg = four_layers(256, 1000, Recompute::none, flash);
        auto planned = [&](int B) {
            return (double)gpu_gpt_activation_bytes(cfg, B, Precision::bf16) +
                   (double)gpu_gpt_operand_bytes(cfg, B, Precision::bf16) + 2.0 * 4 * B * (cfg.block_size + 1);
        };
        const double used = device_bytes_taken(cfg, 16, Precision::bf16) - device_bytes_taken(cfg, 8, Precision::bf16);
        const double plan = planned(16) - planned(8);
        INFO((flash ? "flash" : "matmul") << " attention: 8 windows more took " << used << " device bytes, planned "
                                          << plan);
        CHECK(std::abs(used - plan) <= 0.05 * plan);
    }
}
