// Picking tokens where the logits are, and decoding through CUDA graphs: cuda::pick_tokens against
// cpu::pick_token (greedy, sampling over the whole vocabulary, rows left to the host, rows asking
// none), a GPU decoder's decode_pick against the CPU's rule on its own logits, and decode's graphs
// against launching kernel by kernel, bit for bit.
#include "../decode_batching.h"
#include "helpers.h"

#include "dptrain/backend/cpu/ops.h"
#include "dptrain/backend/cuda/decoder.h"
#include "dptrain/model/decoder.h"
#include "dptrain/model/model.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

using namespace dptrain;
using cudatest::DeviceBuffer;
using cudatest::randn;

namespace {

TokenDraw draw(int vocab, double temperature, double u, int top_k = 0, double top_p = 1.0) {
    TokenDraw d;
    d.vocab = vocab;
    d.temperature = temperature;
    d.u = u;
    d.top_k = top_k;
    d.top_p = top_p;
    return d;
}

// Rows of logits (n, stride), each with its draw; the GPU's ids against the CPU's, and the count of
// rows the GPU left to the host.
struct PickCase {
    int stride = 0;
    std::vector<float> logits;
    std::vector<TokenDraw> draws;
};

int gpu_cpu_differences(const PickCase& c, int* left_to_host) {
    const int n = (int)c.draws.size();
    DeviceBuffer<float> d_logits(c.logits);
    DeviceBuffer<TokenDraw> d_draws(c.draws);
    DeviceBuffer<int> d_ids(std::vector<int>(n, -7));
    cuda::pick_tokens(d_ids, d_logits, n, c.stride, d_draws, nullptr);
    const std::vector<int> got = d_ids.get();
    std::vector<float> probs(c.stride);
    std::vector<int> order(c.stride);
    int differ = 0;
    *left_to_host = 0;
    for (int r = 0; r < n; ++r) {
        const float* z = c.logits.data() + (size_t)r * c.stride;
        const int want = cpu::pick_token(z, c.draws[r], probs.data(), order.data());
        if (got[r] == cuda::kPickOnHost) {
            ++*left_to_host;
            continue;
        }
        if (got[r] != want) {
            ++differ;
            if (differ <= 5) WARN("row " << r << ": GPU " << got[r] << ", CPU " << want << " (temperature "
                                         << c.draws[r].temperature << ", u " << c.draws[r].u << ")");
        }
    }
    return differ;
}

// How many of the most likely ids the CPU's nucleus (top_p over the whole vocabulary) holds: a
// whole sort, the probabilities rounded to float and summed in that order against the unrounded
// mass, as cpu::pick_token does.
int nucleus(const float* z, int V, double temperature, double top_p) {
    std::vector<int> order(V);
    for (int i = 0; i < V; ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return z[a] > z[b]; });
    const float top = z[order[0]];
    double sum = 0, acc = 0;
    for (int i = 0; i < V; ++i) sum += std::exp((z[i] - top) / temperature);
    for (int n = 0; n < V; ++n)
        if ((acc += (float)std::exp((z[order[n]] - top) / temperature)) >= top_p * sum) return n + 1;
    return V;
}

// Whether pick_tokens leaves a row to the host: a top_k above its 2,048 sorted ids, or a nucleus
// over the whole vocabulary wider than them.
bool for_the_host(const float* z, const TokenDraw& d) {
    const int k = d.top_k > 0 ? std::min(d.top_k, d.vocab) : d.vocab;
    if (!(d.temperature > 0)) return false;
    if (k < d.vocab) return k > 2048;
    return d.top_p < 1.0 && d.vocab > 2048 && nucleus(z, d.vocab, d.temperature, d.top_p) > 2048;
}

} // namespace

// The same token from the same logits and draw. Over the whole vocabulary the CPU sums the mass in
// id order one by one, the GPU by chunks in id order; a top-k or nucleus row is sorted on both
// (the GPU: its 2,048 most likely ids by a radix select and a bitonic sort, equal logits by id;
// the CPU's partial sort orders equal logits its own way, so no cut row here has two). The sums
// differ in their last bits only: a draw lands on another token only where u sits within ~1e-15
// of a boundary, never in these draws.
TEST_CASE("cuda pick_tokens picks cpu::pick_token's ids: greedy, sampled, top-k, nucleus, none", "[cuda]") {
    REQUIRE_GPU_OR_SKIP();
    for (int V : {1, 7, 255, 256, 1000, 2048, 2049, 50257}) {
        INFO("vocab " << V);
        PickCase c;
        c.stride = V + 47;  // a padded row: ids past vocab are never drawn
        const int n = 112;  // 14 rows of each of 8 kinds, each u below twice
        c.logits = randn((size_t)n * c.stride, 5000 + V, 3.0f);
        const double us[] = {0.0, 1e-9, 0.25, 0.5, 0.75, 0.999999, 1.0 - 1e-12};
        int host = 0;
        for (int r = 0; r < n; ++r) {
            float* z = c.logits.data() + (size_t)r * c.stride;
            for (int i = V; i < c.stride; ++i) z[i] = 100.0f;  // would win, were they read
            const int kind = r % 8;
            // Ties for the largest (the first id wins, sorted or not), and masked ids (never drawn).
            if ((r % 16 == 1 || r % 16 == 4 || r % 16 == 0) && V > 3) z[V / 2] = z[V - 1] = 50.0f;
            if (r % 8 == 2 || r % 16 == 6) for (int i = 0; i < V; i += 3) z[i] = -INFINITY;
            if (r % 16 == 14) z[0] = -0.0f, z[V - 1] = 0.0f;  // -0 and +0 compare equal
            const double u = us[(r / 8) % 7];
            switch (kind) {
            case 0: c.draws.push_back(draw(V, 0.0, 0)); break;
            case 1: c.draws.push_back(draw(V, 1.0, u)); break;
            case 2: c.draws.push_back(draw(V, 0.7, u)); break;
            case 3: c.draws.push_back(draw(V, 2.5, u)); break;
            case 4: c.draws.push_back(draw(V, 0.8, u, std::min(V / 2, 40))); break;
            case 5: c.draws.push_back(draw(V, 1.0, u, 3000)); break;  // the host's beyond 2,048
            case 6: c.draws.push_back(draw(V, 1.0, u, 0, r % 16 == 6 ? 0.99 : 0.5)); break;
            default: c.draws.push_back(draw(V, -1.0, 0)); break;  // none asked
            }
            host += for_the_host(z, c.draws.back());
        }
        int left = 0;
        CHECK(gpu_cpu_differences(c, &left) == 0);
        CHECK(left == host);
    }
    // Many draws over one row, u evenly spread: every draw equals the CPU's, so each token's share is
    // its probability within 1/n (the rule tests/unit/test_sampling.cpp holds to the softmax); the
    // same row's top 3 and its nuclei too.
    PickCase c;
    c.stride = 5;
    const std::vector<float> row = {1.0f, 2.0f, 0.5f, -1.0f, 2.5f};
    const int n = 4096;
    for (int r = 0; r < n; ++r) {
        c.logits.insert(c.logits.end(), row.begin(), row.end());
        c.draws.push_back(draw(5, 1.0, (r + 0.5) / n));
    }
    {
        DeviceBuffer<float> d_logits(c.logits);
        DeviceBuffer<TokenDraw> d_draws(c.draws);
        DeviceBuffer<int> d_ids(std::vector<int>(n, -7));
        cuda::pick_tokens(d_ids, d_logits, n, c.stride, d_draws, nullptr);
        const std::vector<int> ids = d_ids.get();
        double sum = 0;
        for (float z : row) sum += std::exp((double)z - 2.5);
        for (int t = 0; t < 5; ++t) {
            const double share = (double)std::count(ids.begin(), ids.end(), t) / n;
            CHECK(std::fabs(share - std::exp((double)row[t] - 2.5) / sum) <= 1.5 / n);
        }
    }
    int left = 0;
    for (auto [k, p] : {std::pair{0, 1.0}, std::pair{3, 1.0}, std::pair{0, 0.9}, std::pair{2, 0.6}}) {
        INFO("top_k " << k << ", top_p " << p);
        for (int r = 0; r < n; ++r) c.draws[r] = draw(5, 1.0, (r + 0.5) / n, k, p);
        CHECK(gpu_cpu_differences(c, &left) == 0);
        CHECK(left == 0);
    }
}

namespace {

GptConfig small(DecoderArch arch) {
    GptConfig c;
    c.vocab_size = 515;
    c.block_size = 40;
    c.n_layer = 2;
    c.n_head = 4;
    c.n_embd = 96;
    c.arch = arch;
    if (arch == DecoderArch::llama) {
        c.n_kv_head = 2;
        c.tie_embeddings = false;
    }
    return c;
}

std::vector<float> params_for(const GptConfig& c) {
    const auto m = make_cpu_lm(c, 0);
    std::vector<float> p(m->num_params());
    m->init(p.data(), 77);
    const auto noise = randn(p.size(), 78, 0.2f);  // logits far from uniform
    for (size_t i = 0; i < p.size(); ++i) p[i] += noise[i];
    return p;
}

// Two slots: a prompt of 6 in slot 0, then a row of each slot a call (every third call slot 0's
// alone) to the block's end; the logits of every call, in order.
std::vector<std::vector<float>> decode_all(Decoder& d, const GptConfig& c) {
    const int V = c.vocab_size, T = c.block_size;
    std::vector<std::vector<float>> out;
    std::vector<int> tok(6), slot(6, 0), pos(6);
    for (int i = 0; i < 6; ++i) tok[i] = (i * 37 + 5) % V, pos[i] = i;
    out.emplace_back((size_t)6 * V);
    d.decode(tok.data(), slot.data(), pos.data(), 6, out.back().data());
    for (int p = 6, q = 0; p < T; ++p) {
        const int n = p % 3 == 0 ? 1 : 2;
        const int t2[2] = {(p * 11) % V, (p * 13 + 1) % V}, s2[2] = {0, 1}, p2[2] = {p, q};
        q += n - 1;
        out.emplace_back((size_t)n * V);
        d.decode(t2, s2, p2, n, out.back().data());
    }
    return out;
}

} // namespace

// A graph replays the kernels it captured with the arguments they had: a row count's graph serves
// every call of that count, its positions and slots read from the device. The same bits as launching
// each kernel, call after call, and one capture per row count up to the slots (2 and 1 here; the
// prompt's 6 rows are launched kernel by kernel).
TEST_CASE("The GPU decoders' CUDA graphs give the bits of launching kernel by kernel", "[cuda]") {
    REQUIRE_GPU_OR_SKIP();
    for (DecoderArch arch : {DecoderArch::gpt2, DecoderArch::llama}) {
        INFO((arch == DecoderArch::llama ? "llama" : "gpt"));
        const GptConfig c = small(arch);
        const std::vector<float> p = params_for(c);
        auto graphed = make_cuda_decoder(c, 0), eager = make_cuda_decoder(c, 0);
        auto* g = dynamic_cast<CudaDecoder*>(graphed.get());
        auto* e = dynamic_cast<CudaDecoder*>(eager.get());
        REQUIRE(g != nullptr);
        REQUIRE(e != nullptr);
        e->set_graphs(false);
        for (Decoder* d : {graphed.get(), eager.get()}) {
            d->reserve(2, c.block_size);
            d->set_params(p.data());
        }
        const auto want = decode_all(*eager, c), got = decode_all(*graphed, c);
        int bad = 0;
        for (size_t k = 0; k < want.size(); ++k) bad += cudatest::bit_mismatches("logits", got[k], want[k]);
        CHECK(bad == 0);
        CHECK(g->graphs_captured() == 2);
        CHECK(e->graphs_captured() == 0);
        // A new reservation frees the graphs with the buffers they name; the next calls capture anew.
        graphed->reserve(2, c.block_size);
        const auto again = decode_all(*graphed, c);
        for (size_t k = 0; k < want.size(); ++k)
            bad += cudatest::bit_mismatches("logits after reserve", again[k], want[k]);
        CHECK(bad == 0);
        CHECK(g->graphs_captured() == 4);
        // A batch's rows keep their bits through the graphs too.
        CHECK(decode_batching::rows_batched_differently(*graphed, c.vocab_size, c.block_size, 3, 2) == 0);
    }
}

// decode_pick: the ids cpu::pick_token takes from the logits decode_pick hands back (the device's
// own), for greedy rows, sampled ones, a top-k row sorted on the device and one wider than it sorts
// (k 2,100 of 2,600: picked on the host, from the logits asked for or from its own copy of the row),
// the same with and without the logits asked for, and a row asking none -1.
TEST_CASE("The GPU decoders' decode_pick picks the CPU rule's ids from their own logits", "[cuda]") {
    REQUIRE_GPU_OR_SKIP();
    for (DecoderArch arch : {DecoderArch::gpt2, DecoderArch::llama}) {
        INFO((arch == DecoderArch::llama ? "llama" : "gpt"));
        GptConfig c = small(arch);
        c.vocab_size = 2600;
        const int V = c.vocab_size, slots = 5;
        const std::vector<float> p = params_for(c);
        auto d = make_cuda_decoder(c, 0), twin = make_cuda_decoder(c, 0);
        for (Decoder* x : {d.get(), twin.get()}) {
            x->reserve(slots, c.block_size);
            x->set_params(p.data());
        }
        std::vector<float> probs(V);
        std::vector<int> order(V);
        int bad = 0, none = 0;
        for (int step = 0; step < 20; ++step) {
            std::vector<int> tok(slots), slot(slots), pos(slots, step);
            std::vector<TokenDraw> draws(slots);
            for (int s = 0; s < slots; ++s) {
                tok[s] = (step * 31 + s * 7) % V, slot[s] = s;
                const double u = std::fmod(0.137 * (step + 1) * (s + 1), 1.0);
                draws[s] = s == 0 ? draw(V - 3, 0.0, 0) : s == 1 ? draw(V - 3, 0.9, u)
                         : s == 2 ? draw(V - 3, 1.1, u, 20) : s == 3 ? draw(V - 3, 1.2, u, 2100) : draw(V, -1.0, 0);
            }
            std::vector<float> logits((size_t)slots * V);
            std::vector<int> ids(slots, -9), ids2(slots, -9);
            d->decode_pick(tok.data(), slot.data(), pos.data(), slots, nullptr, 0, draws.data(), ids.data(),
                           logits.data());
            twin->decode_pick(tok.data(), slot.data(), pos.data(), slots, nullptr, 0, draws.data(), ids2.data());
            for (int s = 0; s < slots; ++s) {
                const int want = cpu::pick_token(logits.data() + (size_t)s * V, draws[s], probs.data(), order.data());
                bad += ids[s] != want;
                bad += ids2[s] != ids[s];
            }
            none += ids[4] == -1;
        }
        CHECK(bad == 0);
        CHECK(none == 20);
    }
}
