// The batches' way onto the GPU (Model::stage): a batch staged on the input stream during the last
// step must give exactly what the same batch copied at forward gives, bit for bit (the same
// kernels on the same bytes), including when something else comes between the stage and its
// forward: an evaluation batch, a batch with fewer rows at the same address, a second stage.
#include "helpers.h"

#include "dptrain/cuda_gpt.h"
#include "dptrain/cuda_mlp.h"

#include <string>

using namespace dptrain;
using namespace cudatest;

namespace {

// Runs `order` on a staging model and on a twin that is never staged: each entry is a batch index
// to forward (and backward), or "s<k>" to stage batch k first. Every loss and every gradient must
// be equal; returns how many forwards found their batch staged.
template <class M>
long run_both(M& staged, M& plain, const std::vector<ModelBatch>& batches, const std::vector<std::string>& order,
              size_t P) {
    std::vector<float> p(P), ga(P), gb(P);
    staged.init(p.data(), 4);
    for (const std::string& op : order) {
        INFO("op " << op);
        if (op[0] == 's') {
            staged.stage(batches[std::stoi(op.substr(1))]);
            continue;
        }
        const ModelBatch& in = batches[std::stoi(op)];
        long ca = 0, cb = 0;
        double la = staged.forward(p.data(), in, &ca), lb = plain.forward(p.data(), in, &cb);
        CHECK(la == lb);
        CHECK(ca == cb);
        std::fill(ga.begin(), ga.end(), 0.0f);
        std::fill(gb.begin(), gb.end(), 0.0f);
        staged.backward(ga.data(), p.data(), in, 0.01f, nullptr);
        plain.backward(gb.data(), p.data(), in, 0.01f, nullptr);
        CHECK(ga == gb);
    }
    return staged.staged_batches();
}

// Batch 1 staged during batch 0's step and used; 2 staged, but 0 comes first (as evaluation
// would), then 2 is copied at forward; 3 has batch 1's address with fewer rows, so the staged 1
// is not used for it; 1 staged twice before its forward; 0 staged and used.
const std::vector<std::string> kOrder = {"0", "s1", "1", "s2", "0", "2", "s1", "3", "s1", "s1", "1", "s0", "0"};
constexpr long kStagedUses = 3;  // "1" after "s1" (twice) and "0" after "s0"

} // namespace

TEST_CASE("CudaGpt: staged windows train exactly as windows copied at forward", "[cuda]") {
    REQUIRE_GPU_OR_SKIP();
    GptConfig cfg;
    cfg.vocab_size = 41;
    cfg.block_size = 16;
    cfg.n_layer = 1;
    cfg.n_head = 2;
    cfg.n_embd = 32;
    const int max_batch = 4, T = cfg.block_size, stride = T + 2;
    CudaGpt staged(cfg, max_batch, 0), plain(cfg, max_batch, 0);
    std::vector<std::vector<int>> rows;
    for (int k = 0; k < 3; ++k) rows.push_back(randint((size_t)max_batch * stride, 60 + k, cfg.vocab_size));
    std::vector<ModelBatch> batches(4);
    for (int k = 0; k < 3; ++k) {
        batches[k].B = k == 0 ? max_batch : 3;
        batches[k].tokens = rows[k].data();
        batches[k].stride = stride;
    }
    batches[3] = batches[1];
    batches[3].B = 2;
    CHECK(run_both(staged, plain, batches, kOrder, staged.num_params()) == kStagedUses);
}

TEST_CASE("CudaMlp: staged rows train exactly as rows copied at forward", "[cuda]") {
    REQUIRE_GPU_OR_SKIP();
    const int max_batch = 24, in = 13, classes = 5;
    CudaMlp staged(in, {32}, classes, Activation::gelu, max_batch, 0);
    CudaMlp plain(in, {32}, classes, Activation::gelu, max_batch, 0);
    std::vector<std::vector<float>> x;
    std::vector<std::vector<int>> y;
    std::vector<ModelBatch> batches(4);
    for (int k = 0; k < 3; ++k) {
        x.push_back(randn((size_t)max_batch * in, 70 + k));
        y.push_back(randint(max_batch, 80 + k, classes));
    }
    for (int k = 0; k < 3; ++k) {
        batches[k].B = k == 2 ? 17 : max_batch;
        batches[k].x = x[k].data();
        batches[k].labels = y[k].data();
    }
    batches[3] = batches[1];
    batches[3].B = 9;
    CHECK(run_both(staged, plain, batches, kOrder, staged.num_params()) == kStagedUses);
}
