// The batches' way onto the GPU (Model::stage): a batch staged on the input stream during the
// last step must give exactly what the same batch copied at forward gives, bit for bit (the same
// kernels on the same bytes). The models run resident, as the trainer runs them, and the next
// batch is staged between a forward and its backward, so the copy runs beside backward's kernels;
// the batches are page-locked, as the trainer's ring is, so the copies really are asynchronous.
// In between come what the trainer can do: an evaluation forward between a stage and its forward,
// a batch at the staged address with fewer or more rows, a batch staged twice.
#include "helpers.h"

#include "dptrain/backend/cuda/gpt.h"
#include "dptrain/backend/cuda/mlp.h"
#include "dptrain/model/gpt.h"
#include "dptrain/model/op_times.h"
#include "dptrain/data/prefetcher.h"

#include <memory>
#include <string>

using namespace dptrain;
using namespace cudatest;

namespace {

// Runs `order` on a staging model and on a twin that is never staged, both resident on the same
// parameters: "f<k>" forwards batch k (an evaluation forward when no backward follows it), "s<k>"
// stages batch k, "b" runs backward of the last forward and compares the gradients, "B" only
// queues that backward, "c" compares the gradients. Every loss and accuracy count, and every
// gradient, must be equal. Returns how many forwards found their batch staged.
template <class M>
long run_both(M& staged, M& plain, const std::vector<ModelBatch>& batches, const std::vector<std::string>& order) {
    const size_t P = staged.num_params();
    std::vector<float> p(P), ga(P), gb(P), unused(P);
    staged.init(p.data(), 4);
    for (M* m : {&staged, &plain}) {
        m->set_resident(true);
        REQUIRE(cudaMemcpy(m->device_params(), p.data(), P * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess);
    }
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    int last = -1;
    for (size_t i = 0; i < order.size(); ++i) {
        const std::string& op = order[i];
        INFO("op " << i << ": " << op);
        if (op[0] == 's') {
            staged.stage(batches[std::stoi(op.substr(1))]);
        } else if (op[0] == 'f') {
            last = std::stoi(op.substr(1));
            long ca = 0, cb = 0;
            double la = staged.forward(nullptr, batches[last], &ca), lb = plain.forward(nullptr, batches[last], &cb);
            CHECK(la == lb);
            CHECK(ca == cb);
        } else if (op == "b" || op == "B") {
            REQUIRE(last >= 0);
            // Queued behind the copy just staged, which runs beside it on the input stream.
            staged.backward(unused.data(), nullptr, batches[last], 0.01f, nullptr);
            plain.backward(unused.data(), nullptr, batches[last], 0.01f, nullptr);
        }
        if (op == "b" || op == "c") {
            REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
            REQUIRE(cudaMemcpy(ga.data(), staged.device_grads(), P * sizeof(float), cudaMemcpyDeviceToHost) ==
                    cudaSuccess);
            REQUIRE(cudaMemcpy(gb.data(), plain.device_grads(), P * sizeof(float), cudaMemcpyDeviceToHost) ==
                    cudaSuccess);
            CHECK(ga == gb);
        }
    }
    staged.unstage();
    return staged.staged_batches();
}

// As the trainer: stage the next batch between a forward and its backward. Batch 3 has batch 1's
// address with fewer rows and batch 4 with more, so a staged 1 is not theirs; "f0" after the
// second step is an evaluation forward that must leave the staged 2 in place.
// At the end, an evaluation forward comes while backward still runs: its batch is copied into the
// slot backward reads, which must wait for backward (the gradients are compared after).
const std::vector<std::string> kOrder = {"f0", "s1", "b",  "f1", "s2", "b",  "f0", "f2", "s1", "b", "f3",
                                         "s1", "s1", "b",  "f1", "s1", "b",  "f4", "s4", "b",  "f4", "s0",
                                         "b",  "f0", "b",  "f1", "B",  "f2", "c"};
constexpr long kStagedUses = 5;  // f1, f2 (after the evaluation), f1, f4 (the second), f0 (the last)

// Page-locks the batches' host memory for the test's length, as the trainer does with its ring.
struct Pinned {
    std::vector<std::unique_ptr<cuda::PinnedHost>> regions;
    void add(void* p, size_t bytes) { regions.push_back(std::make_unique<cuda::PinnedHost>(p, bytes)); }
};

} // namespace

TEST_CASE("CudaGpt: staged windows train exactly as windows copied at forward", "[cuda]") {
    REQUIRE_GPU_OR_SKIP();
    GptConfig cfg;
    cfg.vocab_size = 41;
    cfg.block_size = 64;
    cfg.n_layer = 1;
    cfg.n_head = 2;
    cfg.n_embd = 32;
    const int max_batch = 16, T = cfg.block_size, stride = T + 2;
    CudaGpt staged(cfg, max_batch, 0), plain(cfg, max_batch, 0);
    std::vector<std::vector<int>> rows;
    Pinned pin;
    for (int k = 0; k < 3; ++k) {
        rows.push_back(randint((size_t)max_batch * stride, 60 + k, cfg.vocab_size));
        pin.add(rows.back().data(), rows.back().size() * sizeof(int));
    }
    std::vector<ModelBatch> batches(5);
    for (int k = 0; k < 3; ++k) {
        batches[k].B = k == 0 ? max_batch : 12;
        batches[k].tokens = rows[k].data();
        batches[k].stride = stride;
    }
    batches[3] = batches[1];
    batches[3].B = 7;
    batches[4] = batches[1];
    batches[4].B = max_batch;
    CHECK(run_both(staged, plain, batches, kOrder) == kStagedUses);
}

TEST_CASE("CudaMlp: staged rows train exactly as rows copied at forward", "[cuda]") {
    REQUIRE_GPU_OR_SKIP();
    const int max_batch = 512, in = 256, classes = 5;
    CudaMlp staged(in, {128}, classes, Activation::gelu, max_batch, 0);
    CudaMlp plain(in, {128}, classes, Activation::gelu, max_batch, 0);
    std::vector<std::vector<float>> x;
    std::vector<std::vector<int>> y;
    Pinned pin;
    for (int k = 0; k < 3; ++k) {
        x.push_back(randn((size_t)max_batch * in, 70 + k));
        y.push_back(randint(max_batch, 80 + k, classes));
        pin.add(x.back().data(), x.back().size() * sizeof(float));
        pin.add(y.back().data(), y.back().size() * sizeof(int));
    }
    std::vector<ModelBatch> batches(5);
    for (int k = 0; k < 3; ++k) {
        batches[k].B = k == 2 ? 400 : 300;
        batches[k].x = x[k].data();
        batches[k].labels = y[k].data();
    }
    batches[3] = batches[1];
    batches[3].B = 100;
    batches[4] = batches[1];
    batches[4].B = max_batch;
    CHECK(run_both(staged, plain, batches, kOrder) == kStagedUses);
}

// --profile-ops on the GPU: the CUDA models time the same ops as their CPU twins, kind by kind,
// in both precisions and both --gpu-state paths (except the GPT's GELU in bf16, which runs inside
// the matmuls around it and is timed with them); what only a GPU does is counted apart: "copy"
// (the batch's way in and, for the GPT, the targets packed on the device; the losses' way back;
// on the host path the parameters' way in and the gradients' way back) and "other" (for the GPT,
// its position table's gradient cleared before backward, which only the encoder's backward adds
// to; every other gradient is written by its first op, so the MLP clears none). A second profiled
// step counts the same.
TEST_CASE("CudaGpt and CudaMlp time the ops their CPU twins time", "[cuda]") {
    REQUIRE_GPU_OR_SKIP();
    GptConfig cfg;
    cfg.vocab_size = 23;
    cfg.block_size = 16;
    cfg.n_layer = 2;
    cfg.n_head = 2;
    cfg.n_embd = 32;
    const int B = 3, T = cfg.block_size, in_dim = 9, classes = 4;
    std::vector<int> tokens = randint((size_t)B * (T + 1), 90, cfg.vocab_size);
    std::vector<float> x = randn((size_t)B * in_dim, 91);
    std::vector<int> y = randint(B, 92, classes);
    ModelBatch gb, mb;
    gb.B = B;
    gb.tokens = tokens.data();
    gb.stride = T + 1;
    mb.B = B;
    mb.x = x.data();
    mb.labels = y.data();
    const OpKind shared[] = {OpKind::matmul,     OpKind::attention,    OpKind::layernorm,
                             OpKind::activation, OpKind::crossentropy, OpKind::encoder};
    auto count = [](Model& m, const ModelBatch& in) {
        std::vector<float> p(m.num_params()), g(m.num_params(), 0.0f);
        m.init(p.data(), 3);
        OpTimes t;
        m.set_op_times(&t);
        m.forward(p.data(), in, nullptr);
        m.backward(g.data(), p.data(), in, 0.1f, nullptr);
        m.set_op_times(nullptr);
        return t;
    };
    for (Precision prec : {Precision::fp32, Precision::bf16})
        for (bool resident : {false, true}) {
            INFO((prec == Precision::bf16 ? "bf16" : "fp32") << (resident ? ", resident" : ", host state"));
            Gpt cpu_gpt(cfg, B);
            CudaGpt gpu_gpt(cfg, B, 0);
            Mlp cpu_mlp(in_dim, {16}, classes, Activation::relu, B);
            CudaMlp gpu_mlp(in_dim, {16}, classes, Activation::relu, B, 0);
            for (Model* m : {(Model*)&cpu_gpt, (Model*)&gpu_gpt, (Model*)&cpu_mlp, (Model*)&gpu_mlp})
                m->set_precision(prec);
            gpu_gpt.set_resident(resident);
            gpu_mlp.set_resident(resident);
            const OpTimes cg = count(cpu_gpt, gb), cm = count(cpu_mlp, mb);
            for (int round = 0; round < 2; ++round) {
                INFO("profiled step " << round + 1);
                const OpTimes gg = count(gpu_gpt, gb), gm = count(gpu_mlp, mb);
                for (OpKind k : shared) {
                    INFO(op_kind_name(k));
                    // bf16: each layer's GELU forward and backward inside fc's and fcproj's matmul ops
                    const long inside = prec == Precision::bf16 && k == OpKind::activation ? 2 * cfg.n_layer : 0;
                    CHECK(gg.calls(k) == cg.calls(k) - inside);
                    CHECK(gm.calls(k) == cm.calls(k));
                }
                const long copies = resident ? 3 : 5;  // + the parameters in, the gradients out
                CHECK(gg.calls(OpKind::copy) == copies);
                CHECK(gm.calls(OpKind::copy) == copies - 1);  // no targets to pack
                CHECK(gg.calls(OpKind::other) == cg.calls(OpKind::other) + 1);
                CHECK(gm.calls(OpKind::other) == cm.calls(OpKind::other));
                CHECK(gg.total() > 0.0);
            }
        }
}
