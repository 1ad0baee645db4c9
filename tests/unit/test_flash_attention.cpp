// Flash attention's CPU twin (src/cpu/flash_attention.cpp) against attention's definition computed
// in double on the same bf16-rounded q, k, v (and dout), over shapes that span several key tiles
// with a partial last one; and the GPT trained with it against the GPT with matmul attention.
#include "helpers.h"

#include "dptrain/backend/cpu/ops.h"
#include "dptrain/core/error.h"
#include "dptrain/model/gpt.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <vector>

using namespace dptrain;
using testing::randn;

namespace {

// The values rounded to bf16 (round_bf16's bits), once: rounding each operand where the loops below
// read it started an OpenMP region per value (round_bf16 is a parallel loop), minutes in all.
std::vector<double> rounded(const std::vector<float>& x) {
    std::vector<float> r(x.size());
    cpu::round_bf16(r.data(), x.data(), (long)x.size());
    return std::vector<double>(r.begin(), r.end());
}

// Tolerances. The op rounds each softmax weight P (forward, into P V and P^T dout) and each dS
// (into dK and dQ) to bf16, a relative error of at most 2^-8 per term, which the definition here
// does not; so each output may differ from the definition by 2^-8 times the sum of its terms'
// magnitudes, plus fp32 noise (sums of up to T terms in another order: 1e-5 of that sum, and
// 1e-5 absolute). lse has no bf16 rounding of its own: 1e-5 (1 + |lse|).
bool within(double got, double want, double terms) {
    return std::fabs(got - want) <= (std::ldexp(1.0, -8) + 1e-5) * terms + 1e-5;
}

void check_definition(int B, int T, int C, int NH, uint64_t seed) {
    INFO("B=" << B << " T=" << T << " C=" << C << " NH=" << NH);
    const int hs = C / NH, C3 = 3 * C;
    auto inp = randn((size_t)B * T * C3, seed), dout = randn((size_t)B * T * C, seed + 1);
    std::vector<float> out((size_t)B * T * C), lse((size_t)B * NH * T), delta(lse.size()), dinp(inp.size(), NAN);
    cpu::flash_attention_forward(out.data(), lse.data(), inp.data(), B, T, C, NH);
    cpu::flash_attention_backward(dinp.data(), delta.data(), dout.data(), inp.data(), out.data(), lse.data(), B, T, C,
                                  NH);
    const double scale = 1.0 / std::sqrt((double)hs);
    const std::vector<double> inp16 = rounded(inp), dout16 = rounded(dout);
    long bad_out = 0, bad_lse = 0, bad_dq = 0, bad_dk = 0, bad_dv = 0;
    for (int b = 0; b < B; ++b)
        for (int h = 0; h < NH; ++h) {
            auto at = [&](int t, int part, int i) { return inp16[((size_t)b * T + t) * C3 + part * C + h * hs + i]; };
            auto d = [&](int t, int i) { return dout16[((size_t)b * T + t) * C + h * hs + i]; };
            // p[t][t2] from the op's own lse (as its backward does), s in double.
            std::vector<double> p((size_t)T * T, 0.0), ds((size_t)T * T, 0.0);
            for (int t = 0; t < T; ++t) {
                std::vector<double> s(t + 1);
                double mx = -1e300, sum = 0;
                for (int t2 = 0; t2 <= t; ++t2) {
                    double x = 0;
                    for (int i = 0; i < hs; ++i) x += at(t, 0, i) * at(t2, 1, i);
                    s[t2] = x * scale;
                    mx = std::max(mx, s[t2]);
                }
                for (int t2 = 0; t2 <= t; ++t2) sum += std::exp(s[t2] - mx);
                const double want_lse = mx + std::log(sum);
                const double got_lse = lse[((size_t)b * NH + h) * T + t];
                bad_lse += !(std::fabs(got_lse - want_lse) <= 1e-5 * (1 + std::fabs(want_lse)));
                for (int t2 = 0; t2 <= t; ++t2) p[(size_t)t * T + t2] = std::exp(s[t2] - got_lse);
                // out = P v; backward: dP = dout v^T, dS = P (dP - delta), delta = dout . out.
                double dl = 0;
                for (int i = 0; i < hs; ++i) {
                    double o = 0, terms = 0;
                    for (int t2 = 0; t2 <= t; ++t2) {
                        o += std::exp(s[t2] - want_lse) * at(t2, 2, i);
                        terms += std::exp(s[t2] - want_lse) * std::fabs(at(t2, 2, i));
                    }
                    const double got = out[((size_t)b * T + t) * C + h * hs + i];
                    bad_out += !within(got, o, terms);
                    dl += (double)dout[((size_t)b * T + t) * C + h * hs + i] * got;
                }
                for (int t2 = 0; t2 <= t; ++t2) {
                    double dp = 0;
                    for (int i = 0; i < hs; ++i) dp += d(t, i) * at(t2, 2, i);
                    ds[(size_t)t * T + t2] = p[(size_t)t * T + t2] * (dp - dl);
                }
            }
            for (int t = 0; t < T; ++t)
                for (int i = 0; i < hs; ++i) {
                    double dq = 0, dk = 0, dv = 0, tq = 0, tk = 0, tv = 0;
                    for (int t2 = 0; t2 < T; ++t2) {
                        const double a = ds[(size_t)t * T + t2], c = ds[(size_t)t2 * T + t], e = p[(size_t)t2 * T + t];
                        dq += a * at(t2, 1, i) * scale;  // dQ = dS K scale
                        tq += std::fabs(a * at(t2, 1, i)) * scale;
                        dk += c * at(t2, 0, i) * scale;  // dK = dS^T Q scale
                        tk += std::fabs(c * at(t2, 0, i)) * scale;
                        dv += e * d(t2, i);  // dV = P^T dout
                        tv += std::fabs(e * d(t2, i));
                    }
                    const size_t row = ((size_t)b * T + t) * C3 + h * hs + i;
                    bad_dq += !within(dinp[row], dq, tq);
                    bad_dk += !within(dinp[row + C], dk, tk);
                    bad_dv += !within(dinp[row + 2 * C], dv, tv);
                }
        }
    CHECK(bad_lse == 0);
    CHECK(bad_out == 0);
    CHECK(bad_dq == 0);
    CHECK(bad_dk == 0);
    CHECK(bad_dv == 0);
    // And the operands were rounded: fp32 attention gives other numbers.
    std::vector<float> out32(out.size()), att((size_t)B * NH * T * T);
    cpu::attention_forward(out32.data(), att.data(), inp.data(), B, T, C, NH, false);
    CHECK(out32 != out);
}

} // namespace

TEST_CASE("flash attention matches attention's definition on bf16 operands", "[ops][gpt][bf16]") {
    check_definition(2, 9, 32, 2, 31);     // one partial tile, hs 16
    check_definition(1, 150, 64, 2, 41);   // tiles of 64, 64, 22; hs 32
    check_definition(1, 128, 128, 2, 51);  // two full tiles, hs 64
    check_definition(1, 70, 128, 1, 61);   // hs 128, a tile and 6
}

TEST_CASE("flash attention: the head sizes it is built for, and a clear refusal", "[ops][gpt]") {
    CHECK(cpu::flash_attention_supported(768, 12));
    CHECK(cpu::flash_attention_supported(64, 4));
    CHECK(cpu::flash_attention_supported(256, 2));
    CHECK_FALSE(cpu::flash_attention_supported(48, 4));  // hs 12
    CHECK_FALSE(cpu::flash_attention_supported(50, 3));  // not a multiple
    GptConfig cfg;
    cfg.n_embd = 48;
    cfg.n_head = 4;
    cfg.flash_attention = true;
    try {
        Gpt g(cfg, 1);
        FAIL("a head size of 12 was accepted");
    } catch (const UserError& e) {
        CHECK(std::string(e.what()).find("--attention flash needs a head size (n_embd / n_head) of 16, 32, 64 or 128, "
                                         "and 48 / 4 is 12") != std::string::npos);
    }
}

TEST_CASE("GPT with flash attention: gradients and a 50-step loss curve as with matmul attention in bf16",
          "[model][gpt][bf16]") {
    GptConfig cfg;
    cfg.vocab_size = 31;
    cfg.block_size = 80;  // two key tiles, the second partial
    cfg.n_layer = 2;
    cfg.n_head = 2;
    cfg.n_embd = 32;
    GptConfig fcfg = cfg;
    fcfg.flash_attention = true;
    const int B = 2;
    Gpt a(cfg, B), b(fcfg, B);
    a.set_precision(Precision::bf16);
    b.set_precision(Precision::bf16);
    // The same loss to 1e-3 at the start; per tensor, the gradient's cosine similarity above 0.999
    // (attention's operands bf16 against TF32, and P and dS rounded); the 50-step curves within 5%
    // (measured: 1.7% apart at most, at step 46; 552 -> 73.37 with matmul attention and 73.45 with
    // flash, whose backward also takes attention's output and its gradient rounded).
    testing::check_gpts_agree(a, b, B, 13, 1e-3, 0.999, 5e-2);
}
