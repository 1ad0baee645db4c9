// Rotary position embeddings on the projected q, k (Hugging Face's rotate-half pairs: element i of
// a head with element i + hs/2), and grouped-query attention's k, v repeated to every query head of
// their group, so the attention ops see (B, T, 3C) as for a GPT. Not for: the angle table
// (model/llama.cpp computes it once, with any frequency scaling).
#include "dptrain/backend/cpu/ops.h"
#include "dptrain/core/parallel.h"

#include <cstring>

namespace dptrain::cpu {

// One head's hs values rotated by the angles of cos, sin (hs/2 each); sign -1 rotates back.
static void rotate_head(float* out, const float* x, const float* cos, const float* sin, int hs, float sign) {
    const int half = hs / 2;
    for (int i = 0; i < half; ++i) {
        const float a = x[i], b = x[i + half], c = cos[i], s = sign * sin[i];
        out[i] = a * c - b * s;
        out[i + half] = b * c + a * s;
    }
}

// Rows [first, last) of (B*T): q rotated, then each query head's k (rotated) and v of its group.
static void rope_qkv_forward_rows(float* out, const float* inp, const float* cos, const float* sin, int T, int NH,
                                  int KV, int hs, long first, long last) {
    const int C = NH * hs, W = (NH + 2 * KV) * hs, group = NH / KV, half = hs / 2;
    for (long r = first; r < last; ++r) {
        const int t = (int)(r % T);
        const float *x = inp + r * W, *c = cos + (size_t)t * half, *s = sin + (size_t)t * half;
        float* o = out + r * 3 * C;
        for (int h = 0; h < NH; ++h) rotate_head(o + h * hs, x + h * hs, c, s, hs, 1.0f);
        for (int h = 0; h < NH; ++h) {
            const int g = h / group;
            rotate_head(o + C + h * hs, x + C + g * hs, c, s, hs, 1.0f);
            std::memcpy(o + 2 * C + h * hs, x + C + KV * hs + g * hs, hs * sizeof(float));
        }
    }
}

// Rows [first, last): q's gradient rotated back; each kv head's k, v gradients summed over the query
// heads of its group in head order (k's rotated back after the sum: a rotation is linear).
static void rope_qkv_backward_rows(float* dinp, const float* dout, const float* cos, const float* sin, int T,
                                   int NH, int KV, int hs, long first, long last) {
    const int C = NH * hs, W = (NH + 2 * KV) * hs, group = NH / KV, half = hs / 2;
    float sum[256];  // hs <= 256 (checked by the model)
    for (long r = first; r < last; ++r) {
        const int t = (int)(r % T);
        const float *d = dout + r * 3 * C, *c = cos + (size_t)t * half, *s = sin + (size_t)t * half;
        float* o = dinp + r * W;
        for (int h = 0; h < NH; ++h) rotate_head(o + h * hs, d + h * hs, c, s, hs, -1.0f);
        for (int g = 0; g < KV; ++g) {
            float* dv = o + C + KV * hs + g * hs;
            for (int i = 0; i < hs; ++i) sum[i] = 0.0f, dv[i] = 0.0f;
            for (int h = g * group; h < (g + 1) * group; ++h)
                for (int i = 0; i < hs; ++i) sum[i] += d[C + h * hs + i], dv[i] += d[2 * C + h * hs + i];
            rotate_head(o + C + g * hs, sum, c, s, hs, -1.0f);
        }
    }
}

void rope_qkv_forward(float* out, const float* inp, const float* cos, const float* sin, int B, int T, int NH, int KV,
                      int hs) {
    parallel_for((long)B * T, 6L * (2 * NH + KV) * hs, [=](long first, long last) {
        rope_qkv_forward_rows(out, inp, cos, sin, T, NH, KV, hs, first, last);
    });
}

void rope_qkv_backward(float* dinp, const float* dout, const float* cos, const float* sin, int B, int T, int NH,
                       int KV, int hs) {
    parallel_for((long)B * T, 8L * (2 * NH + KV) * hs, [=](long first, long last) {
        rope_qkv_backward_rows(dinp, dout, cos, sin, T, NH, KV, hs, first, last);
    });
}

void rope_decode(float* qkv, const int* pos, const float* cos, const float* sin, int n, int NH, int KV, int hs) {
    const int W = (NH + 2 * KV) * hs, half = hs / 2;
    float head[256];
    for (int i = 0; i < n; ++i) {
        const float *c = cos + (size_t)pos[i] * half, *s = sin + (size_t)pos[i] * half;
        for (int h = 0; h < NH + KV; ++h) {  // the q heads, then the k heads: contiguous
            float* x = qkv + (size_t)i * W + h * hs;
            rotate_head(head, x, c, s, hs, 1.0f);
            std::memcpy(x, head, hs * sizeof(float));
        }
    }
}

} // namespace dptrain::cpu
