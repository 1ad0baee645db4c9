// DeviceStep (--gpu-state device) against the host path it replaces: the same CudaGpt trained 20
// steps with its parameters and optimizer on the GPU (resident, DeviceStep's norm, clipping and
// update kernels) and on the host (Optimizer, clip_grad_norm), for AdamW and SGD, with clipping
// active. One process, no MPI (no topology: nothing to sum).
#include "helpers.h"

#include "dptrain/backend/cuda/gpt.h"
#include "dptrain/backend/cuda/device_step.h"
#include "dptrain/model/optim.h"

#include <cmath>
#include <memory>

using namespace dptrain;
using namespace cudatest;

// The GPT these tests train: 2 layers of width 32, 16 tokens, a vocabulary of 53.
static GptConfig small_gpt() {
    GptConfig cfg;
    cfg.vocab_size = 53;
    cfg.block_size = 16;
    cfg.n_layer = 2;
    cfg.n_head = 2;
    cfg.n_embd = 32;
    return cfg;
}

// B windows of T + 1 tokens, back to back in `tokens`.
static ModelBatch windows(std::vector<int>& tokens, int B, int T) {
    ModelBatch batch;
    batch.B = B;
    batch.tokens = tokens.data();
    batch.stride = T + 1;
    return batch;
}

TEST_CASE("DeviceStep: 20 resident steps match the host optimizer", "[cuda]") {
    REQUIRE_GPU_OR_SKIP();
    const GptConfig cfg = small_gpt();
    const int B = 4, T = cfg.block_size;
    for (Optimizer::Kind kind : {Optimizer::Kind::adamw, Optimizer::Kind::sgd}) {
        INFO((kind == Optimizer::Kind::adamw ? "adamw" : "sgd"));
        CudaGpt host_model(cfg, B, 0), dev_model(cfg, B, 0);
        const size_t P = host_model.num_params();
        std::vector<float> p_host(P), g_host(P), p_dev(P), g_unused(P);
        host_model.init(p_host.data(), 4);
        p_dev = p_host;
        std::vector<int> tokens = randint((size_t)B * (T + 1), 41, cfg.vocab_size);
        const ModelBatch batch = windows(tokens, B, T);
        DeviceStep::Hyper h;
        h.kind = kind;
        h.beta1 = 0.9;
        h.beta2 = 0.95;
        h.weight_decay = 0.1;
        h.momentum = 0.9;
        Optimizer opt_host(kind, host_model.layout(), h.beta1, h.beta2, h.eps, h.momentum, h.weight_decay);
        Optimizer opt_dev(kind, dev_model.layout(), h.beta1, h.beta2, h.eps, h.momentum, h.weight_decay);
        dev_model.set_resident(true);
        DeviceStep step(dev_model, dev_model.layout(), h);
        step.upload(p_dev.data(), opt_dev);
        const double lr = kind == Optimizer::Kind::adamw ? 3e-3 : 0.05, clip = 0.5;
        const float scale = 1.0f / (B * T);
        int clipped = 0;
        for (int t = 1; t <= 20; ++t) {
            INFO("step " << t);
            std::fill(g_host.begin(), g_host.end(), 0.0f);
            double a = host_model.forward(p_host.data(), batch, nullptr);
            host_model.backward(g_host.data(), p_host.data(), batch, scale, nullptr);
            double na = global_norm(g_host.data(), P);
            clip_grad_norm(g_host.data(), P, clip);
            opt_host.step(p_host.data(), g_host.data(), lr, t);

            double b = dev_model.forward(nullptr, batch, nullptr);  // resident: reads no host parameters
            dev_model.backward(g_unused.data(), nullptr, batch, scale, nullptr);
            double nb = step.norm();
            step.update(nb, clip, lr, t);
            // The same GPU forward and backward on parameters that differ only by the two
            // optimizers' rounding (a few ulps a step): 1e-4 relative over 20 steps.
            CHECK(b == Approx(a).epsilon(1e-4));
            CHECK(nb == Approx(na).epsilon(1e-4));
            clipped += na > clip;
        }
        CHECK(clipped > 0);  // the clipping path ran
        CHECK(g_unused == std::vector<float>(P, 0.0f));  // resident backward leaves the host buffer alone
        // download(): the device's parameters and state, as the host path has them.
        step.download(p_dev.data(), opt_dev);
        double pmax = 0, pdiff = 0, mdiff = 0, mmax = 0;
        for (size_t i = 0; i < P; ++i) {
            pmax = std::max(pmax, (double)std::fabs(p_host[i]));
            pdiff = std::max(pdiff, (double)std::fabs(p_host[i] - p_dev[i]));
            mmax = std::max(mmax, (double)std::fabs(opt_host.m()[i]));
            mdiff = std::max(mdiff, (double)std::fabs(opt_host.m()[i] - opt_dev.m()[i]));
        }
        INFO("parameters: largest " << pmax << ", difference " << pdiff << "; moments: " << mmax << ", " << mdiff);
        CHECK(pdiff <= 1e-4 * pmax);
        CHECK(mdiff <= 1e-3 * mmax);
    }
}

TEST_CASE("Resident CudaGpt tells the hook of each finished layer, last layer first", "[cuda]") {
    REQUIRE_GPU_OR_SKIP();
    GptConfig cfg;
    cfg.vocab_size = 11;
    cfg.block_size = 6;
    cfg.n_layer = 3;
    cfg.n_head = 2;
    cfg.n_embd = 8;
    CudaGpt m(cfg, 2, 0);
    m.set_resident(true);
    std::vector<float> p(m.num_params());
    m.init(p.data(), 1);
    DeviceStep::Hyper h;
    Optimizer opt(h.kind, m.layout(), h.beta1, h.beta2, h.eps, h.momentum, h.weight_decay);
    DeviceStep step(m, m.layout(), h);
    step.upload(p.data(), opt);
    struct Recorder : GradHook {
        std::vector<size_t> offsets;
        void grads_ready_from(size_t o) override { offsets.push_back(o); }
    } rec;
    std::vector<int> tok(2 * 7, 3);
    ModelBatch in;
    in.B = 2;
    in.tokens = tok.data();
    in.stride = 7;
    m.forward(nullptr, in, nullptr);
    m.backward(nullptr, nullptr, in, 0.1f, &rec);
    // As Gpt::backward: the final LayerNorm, each block from the last, then everything (offset 0).
    REQUIRE(rec.offsets.size() == (size_t)cfg.n_layer + 2);
    CHECK(rec.offsets.front() == m.layout().find("lnf.weight").offset);
    for (size_t i = 1; i < rec.offsets.size(); ++i) CHECK(rec.offsets[i] < rec.offsets[i - 1]);
    CHECK(rec.offsets.back() == 0);
}

// In bf16 the update also writes the model's rounded copy of the parameters, which the next forward
// then takes without rounding them itself: after each update the copy is the new parameters'
// rounding, bit for bit, and a forward from it gives the loss of a forward that rounds them itself;
// after upload() the next forward rounds the parameters it was given, not the update's copy.
TEST_CASE("DeviceStep in bf16: the update writes the matmuls' rounded parameters", "[cuda]") {
    REQUIRE_GPU_OR_SKIP();
    const GptConfig cfg = small_gpt();
    const int B = 4, T = cfg.block_size;
    std::vector<int> tokens = randint((size_t)B * (T + 1), 43, cfg.vocab_size);
    const ModelBatch batch = windows(tokens, B, T);
    for (Optimizer::Kind kind : {Optimizer::Kind::adamw, Optimizer::Kind::sgd}) {
        INFO((kind == Optimizer::Kind::adamw ? "adamw" : "sgd"));
        CudaGpt m(cfg, B, 0, Precision::bf16);
        m.set_resident(true);
        const size_t P = m.num_params();
        std::vector<float> p(P), got(P);
        std::vector<bf16> got16(P);
        m.init(p.data(), 5);
        DeviceStep::Hyper h;
        h.kind = kind;
        h.weight_decay = 0.1;
        Optimizer opt(kind, m.layout(), h.beta1, h.beta2, h.eps, h.momentum, h.weight_decay);
        DeviceStep step(m, m.layout(), h);
        step.upload(p.data(), opt);
        REQUIRE(m.rounded_params() != nullptr);
        auto download = [&] {
            REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
            REQUIRE(cudaMemcpy(got.data(), m.device_params(), P * sizeof(float), cudaMemcpyDeviceToHost) ==
                    cudaSuccess);
            REQUIRE(cudaMemcpy(got16.data(), m.rounded_params(), P * sizeof(bf16), cudaMemcpyDeviceToHost) ==
                    cudaSuccess);
        };
        const double lr = kind == Optimizer::Kind::adamw ? 3e-3 : 0.05;
        for (int t = 1; t <= 5; ++t) {
            INFO("step " << t);
            // Step 1: both forwards round the upload; then the first takes the update's copy.
            const double from_update = m.forward(nullptr, batch, nullptr);
            m.set_rounded_current(false);
            const double rounded_here = m.forward(nullptr, batch, nullptr);
            CHECK(from_update == rounded_here);  // the same bf16 weights, so the same bits
            m.backward(nullptr, nullptr, batch, 1.0f / (B * T), nullptr);
            step.update(step.norm(), 0.0, lr, t);
            download();
            CHECK(bf16_mismatches("the rounded parameters after the update", got16, got) == 0);
        }
        // The forward after an update takes the copy without rounding: parameters overwritten
        // behind the model's back (nothing real does that) leave it as the update wrote it.
        const std::vector<bf16> from_update = got16;
        REQUIRE(cudaMemset(m.device_params(), 0, P * sizeof(float)) == cudaSuccess);
        REQUIRE(cudaDeviceSynchronize() == cudaSuccess);  // done before forward's stream reads them
        m.forward(nullptr, batch, nullptr);
        download();
        CHECK(got16 == from_update);
        CHECK(got == std::vector<float>(P, 0.0f));
        // Parameters uploaded after an update: the next forward rounds them (the update's copy is
        // of the parameters before).
        for (float& x : p) x *= 0.5f;
        step.upload(p.data(), opt);
        const double after_upload = m.forward(nullptr, batch, nullptr);
        download();
        CHECK(bf16_mismatches("the rounded parameters after upload and forward", got16, p) == 0);
        m.set_rounded_current(false);
        CHECK(after_upload == m.forward(nullptr, batch, nullptr));
    }
}

// --shard-optimizer on the GPU, the update's half (no NCCL needed): three simulated ranks, each a
// DeviceStep keeping shard_span(P, r, 3) of the state, trained on the same windows, with each
// shard copied into the other models after the update (what the all-gather does), against one
// unsharded DeviceStep. The same gradients and the same element-wise update at other offsets: the
// parameters and each shard's state equal the replicated ones bit for bit (no clipping, whose
// factor would come from the norm's squares added in another order); the shards' norms make the
// whole's within 1e-12 relative (double sums in another order).
TEST_CASE("DeviceStep with sharded state: three simulated ranks' shards make the replicated update", "[cuda]") {
    REQUIRE_GPU_OR_SKIP();
    const GptConfig cfg = small_gpt();
    const int B = 2, T = cfg.block_size, R = 3;
    std::vector<int> tokens = randint((size_t)B * (T + 1), 47, cfg.vocab_size);
    const ModelBatch batch = windows(tokens, B, T);
    for (Optimizer::Kind kind : {Optimizer::Kind::adamw, Optimizer::Kind::sgd}) {
        INFO((kind == Optimizer::Kind::adamw ? "adamw" : "sgd"));
        DeviceStep::Hyper h;
        h.kind = kind;
        h.weight_decay = 0.1;
        h.momentum = 0.9;
        CudaGpt whole(cfg, B, 0);
        const size_t P = whole.num_params();
        std::vector<float> p(P);
        whole.init(p.data(), 6);
        whole.set_resident(true);
        Optimizer opt_whole(h, whole.layout());
        DeviceStep step_whole(whole, whole.layout(), h);
        step_whole.upload(p.data(), opt_whole);
        std::vector<std::unique_ptr<CudaGpt>> models;
        std::vector<std::unique_ptr<Optimizer>> opts;
        std::vector<std::unique_ptr<DeviceStep>> steps;
        for (int r = 0; r < R; ++r) {
            models.push_back(std::make_unique<CudaGpt>(cfg, B, 0));
            models[r]->set_resident(true);
            const Span mine = shard_span(P, r, R);
            opts.push_back(std::make_unique<Optimizer>(h, models[r]->layout(), mine));
            DeviceStep::Sum how;
            how.shard = true;
            how.shard_rank = r;
            how.shard_ranks = R;
            steps.push_back(std::make_unique<DeviceStep>(*models[r], models[r]->layout(), h, how));
            CHECK(steps[r]->shard().begin == mine.begin);
            CHECK(steps[r]->shard().end == mine.end);
            steps[r]->upload(p.data(), *opts[r]);
        }
        const double lr = kind == Optimizer::Kind::adamw ? 3e-3 : 0.05;
        for (int t = 1; t <= 5; ++t) {
            INFO("step " << t);
            whole.forward(nullptr, batch, nullptr);
            whole.backward(nullptr, nullptr, batch, 1.0f / (B * T), nullptr);
            const double n_whole = step_whole.norm();
            step_whole.update(n_whole, 0.0, lr, t);
            double squares = 0;
            for (int r = 0; r < R; ++r) {
                models[r]->forward(nullptr, batch, nullptr);
                models[r]->backward(nullptr, nullptr, batch, 1.0f / (B * T), nullptr);
                const double n = steps[r]->norm();
                squares += n * n;
                CHECK(steps[r]->update(n_whole, 0.0, lr, t) == 0.0);  // nothing to gather without ranks
            }
            CHECK(std::sqrt(squares) == Approx(n_whole).epsilon(1e-12));
            // The all-gather, by hand: each shard from its owner into every other model.
            REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
            for (int r = 0; r < R; ++r)
                for (int q = 0; q < R; ++q) {
                    const Span s = shard_span(P, q, R);
                    if (q != r && s.size() > 0)
                        REQUIRE(cudaMemcpy(models[r]->device_params() + s.begin, models[q]->device_params() + s.begin,
                                           s.size() * sizeof(float), cudaMemcpyDeviceToDevice) == cudaSuccess);
                }
            REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
        }
        std::vector<float> want(P), got(P);
        step_whole.download(want.data(), opt_whole);
        for (int r = 0; r < R; ++r) {
            INFO("simulated rank " << r);
            steps[r]->download(got.data(), *opts[r]);
            CHECK(bit_mismatches("parameters", got, want) == 0);
            const Span s = shard_span(P, r, R);
            const std::vector<float> m_want(opt_whole.m().begin() + s.begin, opt_whole.m().begin() + s.end);
            CHECK(bit_mismatches("first moment", opts[r]->m(), m_want) == 0);
            if (kind == Optimizer::Kind::adamw) {
                const std::vector<float> v_want(opt_whole.v().begin() + s.begin, opt_whole.v().begin() + s.end);
                CHECK(bit_mismatches("second moment", opts[r]->v(), v_want) == 0);
            }
        }
    }
}
