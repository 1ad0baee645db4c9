// Gradient accumulation on the device (--grad-accum with --gpu-state device): a resident CudaGpt,
// CudaLlama or CudaMlp told begin_gradients() writes the step's first backward's gradients and adds the later
// micro-batches' to them, which must equal the CPU twin's backwards added into one zeroed buffer.
// The device's buffer is poisoned with NaN before each step's first backward, so a gradient the
// first backward failed to write, or a later one that wrote instead of adding, shows.
#include "helpers.h"

#include "dptrain/backend/cuda/gpt.h"
#include "dptrain/backend/cuda/llama.h"
#include "dptrain/backend/cuda/mlp.h"

#include <algorithm>
#include <cmath>

using namespace dptrain;
using namespace cudatest;

namespace {

// The parameters to the device, as DeviceStep::upload puts them there.
void upload(cuda::Resident& m, const std::vector<float>& p) {
    REQUIRE(cudaMemcpy(m.device_params(), p.data(), p.size() * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);  // before the model's stream reads them
    m.set_rounded_current(false);
}

std::vector<float> device_grads(cuda::Resident& m, size_t P) {
    std::vector<float> g(P);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    REQUIRE(cudaMemcpy(g.data(), m.device_grads(), P * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess);
    return g;
}

void poison(cuda::Resident& m, size_t P) {
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    REQUIRE(cudaMemset(m.device_grads(), 0xFF, P * sizeof(float)) == cudaSuccess);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
}

// Each view of `got` within tol of the largest |want| in that view; NaN fails.
void check_views(const ParamLayout& layout, const std::vector<float>& got, const std::vector<float>& want,
                 double tol) {
    for (const ParamView& v : layout.views) {
        double gmax = 0, diff = 0;
        bool finite = true;
        for (size_t i = v.offset; i < v.offset + v.size; ++i) {
            finite = finite && std::isfinite(got[i]);
            gmax = std::max(gmax, (double)std::fabs(want[i]));
            diff = std::max(diff, (double)std::fabs((double)want[i] - got[i]));
        }
        INFO(v.name << ": largest gradient " << gmax << ", largest difference " << diff);
        CHECK(finite);
        CHECK(diff <= tol * gmax);
    }
}

// Step 1: `micro` micro-batches summed on the device against the CPU's sum; step 2: one
// micro-batch after begin_gradients() again, written over step 1's sum (not added to it).
template <class Cpu, class Gpu>
void accumulate_against_cpu(Cpu& cpu, Gpu& gpu, const std::vector<ModelBatch>& batches, float scale, double tol) {
    const size_t P = cpu.num_params();
    std::vector<float> p(P), want(P, 0.0f);
    cpu.init(p.data(), 7);
    gpu.set_resident(true);
    upload(gpu, p);
    poison(gpu, P);
    gpu.begin_gradients();
    for (const ModelBatch& b : batches) {
        cpu.forward(p.data(), b, nullptr);
        cpu.backward(want.data(), p.data(), b, scale, nullptr);
        gpu.forward(nullptr, b, nullptr);
        gpu.backward(nullptr, nullptr, b, scale, nullptr);
    }
    {
        INFO(batches.size() << " micro-batches summed on the device");
        check_views(cpu.layout(), device_grads(gpu, P), want, tol);
    }
    std::fill(want.begin(), want.end(), 0.0f);
    gpu.begin_gradients();
    cpu.forward(p.data(), batches[0], nullptr);
    cpu.backward(want.data(), p.data(), batches[0], scale, nullptr);
    gpu.forward(nullptr, batches[0], nullptr);
    gpu.backward(nullptr, nullptr, batches[0], scale, nullptr);
    INFO("the next step's one micro-batch writes over the last step's sum");
    check_views(cpu.layout(), device_grads(gpu, P), want, tol);
}

} // namespace

// Tolerances as test_cuda_gpt.cpp's single backward (fp32 1e-4, bf16 2e-2 of each tensor's
// largest gradient): the sum of the micro-batches' gradients adds nothing that compounds.
TEST_CASE("Resident CudaGpt sums a step's micro-batches on the device as the CPU twin does", "[cuda]") {
    REQUIRE_GPU_OR_SKIP();
    GptConfig cfg;
    cfg.vocab_size = 61;
    cfg.block_size = 16;
    cfg.n_layer = 2;
    cfg.n_head = 4;
    cfg.n_embd = 32;
    const int max_batch = 6, T = cfg.block_size;
    const std::vector<int> sizes = {6, 3, 5};  // the last micro-batch of a shard may be shorter
    std::vector<std::vector<int>> tokens;
    std::vector<ModelBatch> batches;
    for (size_t k = 0; k < sizes.size(); ++k) tokens.push_back(randint((size_t)sizes[k] * (T + 1), 60 + k, 61));
    for (size_t k = 0; k < sizes.size(); ++k) {
        ModelBatch b;
        b.B = sizes[k];
        b.tokens = tokens[k].data();
        b.stride = T + 1;
        batches.push_back(b);
    }
    for (Precision prec : {Precision::fp32, Precision::bf16}) {
        INFO((prec == Precision::bf16 ? "bf16" : "fp32"));
        Gpt cpu(cfg, max_batch);
        cpu.set_precision(prec);
        CudaGpt gpu(cfg, max_batch, 0, prec);
        accumulate_against_cpu(cpu, gpu, batches, 1.0f / (14 * T), prec == Precision::bf16 ? 2e-2 : 1e-4);
    }
}

// The untied head leaves wte to the encoder alone, which adds: its first backward must still write.
TEST_CASE("Resident CudaLlama sums a step's micro-batches on the device as the CPU twin does", "[cuda][llama]") {
    REQUIRE_GPU_OR_SKIP();
    GptConfig cfg;
    cfg.arch = DecoderArch::llama;
    cfg.vocab_size = 61;
    cfg.block_size = 16;
    cfg.n_layer = 2;
    cfg.n_head = 4;
    cfg.n_kv_head = 2;
    cfg.n_embd = 32;
    const int max_batch = 6, T = cfg.block_size;
    const std::vector<int> sizes = {6, 3, 5};
    std::vector<std::vector<int>> tokens;
    std::vector<ModelBatch> batches;
    for (size_t k = 0; k < sizes.size(); ++k) tokens.push_back(randint((size_t)sizes[k] * (T + 1), 70 + k, 61));
    for (size_t k = 0; k < sizes.size(); ++k) {
        ModelBatch b;
        b.B = sizes[k];
        b.tokens = tokens[k].data();
        b.stride = T + 1;
        batches.push_back(b);
    }
    for (bool tied : {true, false})
        for (Precision prec : {Precision::fp32, Precision::bf16}) {
            INFO((prec == Precision::bf16 ? "bf16" : "fp32") << (tied ? ", tied" : ", untied"));
            cfg.tie_embeddings = tied;
            Llama cpu(cfg, max_batch);
            cpu.set_precision(prec);
            CudaLlama gpu(cfg, max_batch, 0, prec);
            accumulate_against_cpu(cpu, gpu, batches, 1.0f / (14 * T), prec == Precision::bf16 ? 2e-2 : 1e-4);
        }
}

// fp32 matmuls chained through three layers: 1e-5 of the largest gradient (test_cuda_mlp.cpp's).
TEST_CASE("Resident CudaMlp sums a step's micro-batches on the device as the CPU twin does", "[cuda]") {
    REQUIRE_GPU_OR_SKIP();
    const int in = 37, classes = 11, max_rows = 40;
    const std::vector<int> sizes = {40, 40, 17};
    std::vector<std::vector<float>> xs;
    std::vector<std::vector<int>> ys;
    std::vector<ModelBatch> batches;
    for (size_t k = 0; k < sizes.size(); ++k) {
        xs.push_back(randn((size_t)sizes[k] * in, 80 + k));
        ys.push_back(randint(sizes[k], 90 + k, classes));
    }
    for (size_t k = 0; k < sizes.size(); ++k) {
        ModelBatch b;
        b.B = sizes[k];
        b.x = xs[k].data();
        b.labels = ys[k].data();
        batches.push_back(b);
    }
    Mlp cpu(in, {64, 29}, classes, Activation::gelu, max_rows);
    CudaMlp gpu(in, {64, 29}, classes, Activation::gelu, max_rows, 0);
    accumulate_against_cpu(cpu, gpu, batches, 1.0f / 97, 1e-5);
}

// Not resident (--gpu-state host), each backward's gradients are written on the device and added
// into the host's buffer: begin_gradients() there must not make a later backward add on the device
// as well (which would count the first micro-batch twice on the host).
TEST_CASE("CudaMlp not resident adds each micro-batch into the host buffer once", "[cuda]") {
    REQUIRE_GPU_OR_SKIP();
    const int in = 9, classes = 5, B = 16;
    Mlp cpu(in, {12}, classes, Activation::relu, B);
    CudaMlp gpu(in, {12}, classes, Activation::relu, B, 0);
    const size_t P = cpu.num_params();
    std::vector<float> p(P), want(P, 0.0f), got(P, 0.0f);
    cpu.init(p.data(), 3);
    std::vector<float> x = randn((size_t)B * in, 5);
    std::vector<int> y = randint(B, 6, classes);
    ModelBatch b;
    b.B = B;
    b.x = x.data();
    b.labels = y.data();
    gpu.begin_gradients();
    for (int k = 0; k < 3; ++k) {
        cpu.forward(p.data(), b, nullptr);
        cpu.backward(want.data(), p.data(), b, 1.0f / B, nullptr);
        gpu.forward(p.data(), b, nullptr);
        gpu.backward(got.data(), p.data(), b, 1.0f / B, nullptr);
    }
    check_views(cpu.layout(), got, want, 1e-5);
}
