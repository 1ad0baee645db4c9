// matmul_forward / matmul_backward in fp32 and bf16 through cuBLAS and cuBLASLt, and to_bf16.
// A row-major (R, K) matrix is cuBLAS's column-major transpose: out = inp @ W^T becomes
// out^T = W @ inp^T (llm.c's mapping). Not for: choosing precision (the caller converts).
#include "dptrain/backend/cuda/ops.h"

#include "check.h"
#include "column_sums.cuh"

#include <cublasLt.h>

#include <cstdint>
#include <cstdio>
#include <deque>

namespace dptrain::cuda {

// out rows set to bias; the GEMM then adds onto it (beta 1): the CPU's order of operations.
__global__ void fill_bias_kernel(float* out, const float* bias, long n, int OC) {
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x)
        out[i] = bias[i % OC];
}

// dbias (OC) += column sums of dout (B, OC), in column_sums' fixed order.
template <class T>
struct BiasTerms {
    const T* dout;
    int OC;
    __device__ void operator()(long row, int c, float* acc) const { acc[0] += as_float(dout[row * OC + c]); }
};

size_t column_sums_scratch(long N, int C, int sums) {
    return N <= 0 || C <= 0 ? 0 : (size_t)sums * column_chunks(N) * C;
}

template <class T>
static void bias_gradient(float* dbias, const T* dout, int B, int OC, Context& ctx, cudaStream_t stream,
                          bool accumulate) {
    column_sums<1>(dbias, nullptr, BiasTerms<T>{dout, OC}, B, OC, ctx, stream, accumulate);
}

// No rows: gradients to be written (accumulate false) become 0; added-to ones stay.
static void no_rows(float* dweight, float* dbias, int C, int OC, bool accumulate, cudaStream_t stream) {
    if (accumulate || OC <= 0) return;
    if (C > 0) CUDA_CHECK(cudaMemsetAsync(dweight, 0, (size_t)OC * C * sizeof(float), stream));
    if (dbias) CUDA_CHECK(cudaMemsetAsync(dbias, 0, (size_t)OC * sizeof(float), stream));
}

// Same rounding as dptrain::to_bf16 (bf16.cpp): bf16_bits (check.h).
__global__ void to_bf16_kernel(uint16_t* dst, const float* src, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = bf16_bits(src[i]);
}

// dst = src rounded, kept in fp32 (cpu::round_bf16's bits); dst may be src.
__global__ void round_bf16_kernel(float* dst, const float* src, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = as_float(bf16_bits(src[i]));
}

// Fills out with the bias (beta 1, as the CPU) or leaves it to be overwritten (beta 0).
static float begin_forward(float* out, const float* bias, int B, int OC, Context& ctx, cudaStream_t stream) {
    ctx.bind_blas(stream);
    if (!bias) return 0.0f;
    long n = (long)B * OC;
    fill_bias_kernel<<<grid_for(n, 256), 256, 0, stream>>>(out, bias, n, OC);
    CUDA_CHECK(cudaGetLastError());
    return 1.0f;
}

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int B, int C, int OC,
                    Context& ctx, cudaStream_t stream) {
    if (B <= 0 || OC <= 0) return;
    float one = 1.0f, beta = begin_forward(out, bias, B, OC, ctx, stream);
    // out^T (OC, B) = W (OC, C) @ inp^T (C, B); W is stored as its transpose (C, OC), hence OP_T.
    CUBLAS_CHECK(cublasSgemm(ctx.blas(), CUBLAS_OP_T, CUBLAS_OP_N, OC, B, C, &one, weight, C, inp, C, &beta, out, OC));
}

void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int B, int C, int OC, Context& ctx, cudaStream_t stream, bool accumulate) {
    if (B <= 0) return no_rows(dweight, dbias, C, OC, accumulate, stream);
    float one = 1.0f, zero = 0.0f, beta = accumulate ? 1.0f : 0.0f;
    ctx.bind_blas(stream);
    // dinp^T (C, B) = W^T (C, OC) @ dout^T (OC, B): both already stored that way.
    if (dinp)
        CUBLAS_CHECK(cublasSgemm(ctx.blas(), CUBLAS_OP_N, CUBLAS_OP_N, C, B, OC, &one, weight, C, dout, OC, &zero,
                                 dinp, C));
    // dweight^T (C, OC) += inp^T (C, B) @ dout (B, OC); beta 0 writes it without reading it.
    CUBLAS_CHECK(cublasSgemm(ctx.blas(), CUBLAS_OP_N, CUBLAS_OP_T, C, OC, B, &one, inp, C, dout, OC, &beta, dweight,
                             C));
    if (dbias) bias_gradient(dbias, dout, B, OC, ctx, stream, accumulate);
}

// ---- cuBLASLt's epilogues: bias, bias gradient, GELU, GELU's gradient ----------------------------
// Why and how: docs/GPU.md, "Note [cuBLASLt plans]".
enum class LtKind { bias, bgrad, gelu, dgelu };

struct LtKey {
    LtKind kind;
    int B, C, OC;
    int align[5];  // of A, B, C/D, the bias (or its gradient; 0: none) and GELU's input (0: none)
    bool out16;    // the output type: fp32, or bf16
    bool operator==(const LtKey& o) const {
        for (int i = 0; i < 5; ++i)
            if (align[i] != o.align[i]) return false;
        return kind == o.kind && B == o.B && C == o.C && OC == o.OC && out16 == o.out16;
    }
};

struct LtPlan {
    LtKey key;
    bool ok;
    cublasLtMatrixLayout_t a, b, d;
    cublasLtMatmulAlgo_t algo;
};

struct LtPlans {
    cublasLtMatmulDesc_t desc[4] = {};  // by LtKind
    std::deque<LtPlan> plans;  // a deque: a plan found stays where it is as others are added
    cublasLtMatmulDesc_t of(LtKind k) const { return desc[(int)k]; }
};

static cublasLtMatmulDesc_t lt_desc(cublasOperation_t ta, cublasOperation_t tb, cublasLtEpilogue_t epilogue) {
    cublasLtMatmulDesc_t d = nullptr;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cudaDataType_t bias_type = CUDA_R_32F;  // the bias, and the bias gradient, in fp32
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
    if (epilogue != CUBLASLT_EPILOGUE_DGELU)  // the one without a bias vector
        CUBLAS_CHECK(
            cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof(bias_type)));
    return d;
}

LtPlans* lt_plans_create() {
    auto* p = new LtPlans;
    p->desc[(int)LtKind::bias] = lt_desc(CUBLAS_OP_T, CUBLAS_OP_N, CUBLASLT_EPILOGUE_BIAS);
    p->desc[(int)LtKind::bgrad] = lt_desc(CUBLAS_OP_N, CUBLAS_OP_T, CUBLASLT_EPILOGUE_BGRADB);
    p->desc[(int)LtKind::gelu] = lt_desc(CUBLAS_OP_T, CUBLAS_OP_N, CUBLASLT_EPILOGUE_GELU_AUX_BIAS);
    p->desc[(int)LtKind::dgelu] = lt_desc(CUBLAS_OP_N, CUBLAS_OP_N, CUBLASLT_EPILOGUE_DGELU);
    return p;
}

void lt_plans_destroy(LtPlans* p) {
    // No CHECK: runs from Context's destructor, possibly while unwinding.
    for (LtPlan& plan : p->plans) {
        cublasLtMatrixLayoutDestroy(plan.a);
        cublasLtMatrixLayoutDestroy(plan.b);
        cublasLtMatrixLayoutDestroy(plan.d);
    }
    for (cublasLtMatmulDesc_t d : p->desc)
        if (d) cublasLtMatmulDescDestroy(d);
    delete p;
}

// The largest power of two up to 256 dividing the address: the heuristic filters by alignment.
static int alignment(const void* p) {
    uintptr_t a = (uintptr_t)p;
    int align = 1;
    while (align < 256 && a % (2 * align) == 0) align *= 2;
    return align;
}

// GELU's input (the aux matrix) has the output's layout: (OC, B) forward, (C, B) for dinp.
static int64_t aux_ld(const LtKey& key) { return key.kind == LtKind::gelu ? key.OC : key.C; }

// Set on the shared descriptor before the heuristic (it checks their alignment) and each call.
static void lt_bind(cublasLtMatmulDesc_t desc, const LtKey& key, const void* bias, const void* aux) {
    if (bias)
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    if (aux) {
        const int64_t ld = aux_ld(key);
        CUBLAS_CHECK(
            cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux)));
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof(ld)));
    }
}

// bias: the bias or its gradient's vector; aux: GELU's input; each null where the kind has none.
static LtPlan& lt_plan(Context& ctx, const LtKey& key, const void* bias, const void* aux) {
    LtPlans& lp = *ctx.lt_plans();
    for (LtPlan& p : lp.plans)
        if (p.key == key) return p;
    LtPlan p{key, false, nullptr, nullptr, nullptr, {}};
    const int B = key.B, C = key.C, OC = key.OC;
    const cudaDataType_t out_type = key.out16 ? CUDA_R_16BF : CUDA_R_32F;
    // Column-major views. Forward: W (C, OC) transposed, inp (C, B), out (OC, B). Weight gradient:
    // inp (C, B), dout (OC, B) transposed, dweight (C, OC). dgelu: W (C, OC), dout (OC, B), dinp (C, B).
    if (key.kind == LtKind::bgrad) {
        CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, CUDA_R_16BF, C, B, C));
        CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, CUDA_R_16BF, OC, B, OC));
        CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.d, CUDA_R_32F, C, OC, C));
    } else if (key.kind == LtKind::dgelu) {
        CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, CUDA_R_16BF, C, OC, C));
        CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, CUDA_R_16BF, OC, B, OC));
        CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.d, out_type, C, B, C));
    } else {
        CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, CUDA_R_16BF, C, OC, C));
        CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, CUDA_R_16BF, C, B, C));
        CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.d, out_type, OC, B, OC));
    }
    // Bias and aux need 16-byte alignment (some epilogue kernels load 16-byte vectors) and aux's ld
    // a multiple of 8 (cuBLASLt's rule); otherwise the separate passes run.
    const bool bias_ok = !bias || key.align[3] >= 16;
    const bool aux_ok = !aux || (key.align[4] >= 16 && aux_ld(key) % 8 == 0);
    if (bias_ok && aux_ok) {
        cublasLtMatmulDesc_t desc = lp.of(key.kind);
        cublasLtMatmulPreference_t pref = nullptr;
        CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
        const size_t ws = ctx.workspace_bytes();
        const uint32_t aa = key.align[0], ab = key.align[1], ad = key.align[2];
        CUBLAS_CHECK(
            cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
        CUBLAS_CHECK(
            cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &aa, sizeof(aa)));
        CUBLAS_CHECK(
            cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &ab, sizeof(ab)));
        CUBLAS_CHECK(
            cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &ad, sizeof(ad)));
        CUBLAS_CHECK(
            cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &ad, sizeof(ad)));
        lt_bind(desc, key, bias, aux);
        cublasLtMatmulHeuristicResult_t found = {};
        int n = 0;
        cublasStatus_t rc = cublasLtMatmulAlgoGetHeuristic(ctx.lt(), desc, p.a, p.b, p.d, p.d, pref, 1, &found, &n);
        cublasLtMatmulPreferenceDestroy(pref);
        // No algorithm is an answer, not an error. Some combinations are undocumented (fp32 bias,
        // bf16 output), so the pick is also checked whole, with its workspace within ours.
        if (rc == CUBLAS_STATUS_SUCCESS && n > 0 && found.state == CUBLAS_STATUS_SUCCESS) {
            cublasLtMatmulHeuristicResult_t checked = {};
            rc = cublasLtMatmulAlgoCheck(ctx.lt(), desc, p.a, p.b, p.d, p.d, &found.algo, &checked);
            if (rc == CUBLAS_STATUS_SUCCESS && checked.state == CUBLAS_STATUS_SUCCESS &&
                checked.workspaceSize <= ws) {
                p.ok = true;
                p.algo = found.algo;
            }
        }
    }
    lp.plans.push_back(p);
    return lp.plans.back();
}

static std::string lt_what(const LtKey& k) {
    static const char* const kinds[] = {"bias", "bias gradient", "bias and GELU", "GELU's backward"};
    return strfmt("the %s epilogue, %s output, B=%d C=%d OC=%d", kinds[(int)k.kind], k.out16 ? "bf16" : "fp32", k.B,
                  k.C, k.OC);
}

// True if it ran. A decline (nothing queued) disables the plan with one warning and returns false:
// the caller runs the unfused form. Other errors are fatal.
static bool lt_ran(cublasStatus_t rc, LtPlan& p) {
    if (rc == CUBLAS_STATUS_SUCCESS) return true;
    if (rc != CUBLAS_STATUS_NOT_SUPPORTED && rc != CUBLAS_STATUS_INVALID_VALUE && rc != CUBLAS_STATUS_ARCH_MISMATCH)
        fatal(strfmt("cuBLAS error %s in cublasLtMatmul with %s", cublasGetStatusString(rc), lt_what(p.key).c_str()));
    p.ok = false;
    std::fprintf(stderr, "dptrain: warning: %s: cuBLASLt declined the algorithm its heuristic chose for %s (%s); the "
                 "unfused form runs instead\n", process_identity().c_str(), lt_what(p.key).c_str(),
                 cublasGetStatusString(rc));
    return false;
}

// The bias (and GELU, where pre is given) in the epilogue, fp32 or bf16 out. False, with nothing
// queued, where there is no plan, the epilogues are off, or the stream is not the context's.
static bool matmul_forward_bf16_lt(void* out, bool out16, const bf16* inp, const bf16* weight, const float* bias,
                                   int B, int C, int OC, Context& ctx, cudaStream_t stream, bf16* pre = nullptr) {
    if (!bias || !ctx.epilogues() || stream != ctx.stream()) return false;
    const LtKind kind = pre ? LtKind::gelu : LtKind::bias;
    const LtKey key{kind, B, C, OC, {alignment(weight), alignment(inp), alignment(out), alignment(bias),
                                     pre ? alignment(pre) : 0}, out16};
    LtPlan& p = lt_plan(ctx, key, bias, pre);
    if (!p.ok) return false;
    cublasLtMatmulDesc_t desc = ctx.lt_plans()->of(kind);
    lt_bind(desc, key, bias, pre);
    const float one = 1.0f, zero = 0.0f;
    return lt_ran(cublasLtMatmul(ctx.lt(), desc, &one, weight, p.a, inp, p.b, &zero, out, p.d, out, p.d, &p.algo,
                                 ctx.workspace(), ctx.workspace_bytes(), stream),
                  p);
}

// dpre (B, C) bf16 = (dout @ weight) * GELU'(pre) in one GEMM (DGELU); false as above.
static bool matmul_dinp_dgelu_lt(bf16* dpre, const bf16* dout, const bf16* weight, const bf16* pre, int B, int C,
                                 int OC, Context& ctx, cudaStream_t stream) {
    if (!ctx.epilogues() || stream != ctx.stream()) return false;
    const LtKey key{LtKind::dgelu, B, C, OC, {alignment(weight), alignment(dout), alignment(dpre), 0, alignment(pre)},
                    true};
    LtPlan& p = lt_plan(ctx, key, nullptr, pre);
    if (!p.ok) return false;
    cublasLtMatmulDesc_t desc = ctx.lt_plans()->of(LtKind::dgelu);
    lt_bind(desc, key, nullptr, pre);
    const float one = 1.0f, zero = 0.0f;
    return lt_ran(cublasLtMatmul(ctx.lt(), desc, &one, weight, p.a, dout, p.b, &zero, dpre, p.d, dpre, p.d, &p.algo,
                                 ctx.workspace(), ctx.workspace_bytes(), stream),
                  p);
}

// dweight += inp^T dout (=: !accumulate); the epilogue's bias gradient goes to reduction scratch,
// then onto dbias. False as above.
static bool matmul_weight_grad_bf16_lt(float* dweight, float* dbias, const bf16* dout, const bf16* inp, int B,
                                       int C, int OC, Context& ctx, cudaStream_t stream, bool accumulate) {
    if (!dbias || !ctx.epilogues() || stream != ctx.stream()) return false;
    float* grad = ctx.reduction_scratch((size_t)OC);  // the models reserve more at construction
    const LtKey key{LtKind::bgrad, B, C, OC,
                    {alignment(inp), alignment(dout), alignment(dweight), alignment(grad), 0}, false};
    LtPlan& p = lt_plan(ctx, key, grad, nullptr);
    if (!p.ok) return false;
    cublasLtMatmulDesc_t desc = ctx.lt_plans()->of(LtKind::bgrad);
    lt_bind(desc, key, grad, nullptr);
    const float one = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    if (!lt_ran(cublasLtMatmul(ctx.lt(), desc, &one, inp, p.a, dout, p.b, &beta, dweight, p.d, dweight, p.d, &p.algo,
                               ctx.workspace(), ctx.workspace_bytes(), stream),
                p))
        return false;  // dweight untouched: nothing was queued
    column_finish_kernel<1><<<(OC + 255) / 256, 256, 0, stream>>>(dbias, nullptr, grad, 1, OC,  // one "chunk"
                                                                  accumulate);
    CUDA_CHECK(cudaGetLastError());
    return true;
}

static void gemm_bf16_separate_bias(float* out, const bf16* inp, const bf16* weight, const float* bias, int B, int C,
                                    int OC, Context& ctx, cudaStream_t stream) {
    float one = 1.0f, beta = begin_forward(out, bias, B, OC, ctx, stream);
    // bf16 x bf16 products are exact in fp32 and summed in fp32: only the inputs' rounding is lost.
    CUBLAS_CHECK(cublasGemmEx(ctx.blas(), CUBLAS_OP_T, CUBLAS_OP_N, OC, B, C, &one, weight, CUDA_R_16BF, C, inp,
                              CUDA_R_16BF, C, &beta, out, CUDA_R_32F, OC, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

void matmul_forward_bf16(float* out, const bf16* inp, const bf16* weight, const float* bias, int B, int C, int OC,
                         Context& ctx, cudaStream_t stream) {
    if (B <= 0 || OC <= 0) return;
    if (bias) {
        const bool fused = matmul_forward_bf16_lt(out, false, inp, weight, bias, B, C, OC, ctx, stream);
        ctx.count_bias_gemm(fused);
        if (fused) return;
    }
    gemm_bf16_separate_bias(out, inp, weight, bias, B, C, OC, ctx, stream);
}

// dinp as fp32, or bf16 rounded by cuBLAS as it stores its fp32 sums, or null.
static void backward_bf16(void* dinp, cudaDataType_t dinp_type, float* dweight, float* dbias, const bf16* dout,
                          const bf16* inp, const bf16* weight, int B, int C, int OC, Context& ctx, cudaStream_t stream,
                          int ld, bool accumulate) {
    if (B <= 0) return no_rows(dweight, dbias, C, OC, accumulate, stream);
    if (ld == 0) ld = OC;
    CUDA_REQUIRE(ld >= OC && (ld == OC || !dbias));
    float one = 1.0f, zero = 0.0f, beta = accumulate ? 1.0f : 0.0f;
    ctx.bind_blas(stream);
    if (dinp)
        CUBLAS_CHECK(cublasGemmEx(ctx.blas(), CUBLAS_OP_N, CUBLAS_OP_N, C, B, OC, &one, weight, CUDA_R_16BF, C, dout,
                                  CUDA_R_16BF, ld, &zero, dinp, dinp_type, C, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    // The bias gradient in the weight GEMM's epilogue where possible (dout read once).
    if (dbias) {
        const bool fused = matmul_weight_grad_bf16_lt(dweight, dbias, dout, inp, B, C, OC, ctx, stream, accumulate);
        ctx.count_bias_grad(fused);
        if (fused) return;
    }
    CUBLAS_CHECK(cublasGemmEx(ctx.blas(), CUBLAS_OP_N, CUBLAS_OP_T, C, OC, B, &one, inp, CUDA_R_16BF, C, dout,
                              CUDA_R_16BF, ld, &beta, dweight, CUDA_R_32F, C, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    if (dbias) bias_gradient(dbias, dout, B, OC, ctx, stream, accumulate);
}

void matmul_backward_bf16(float* dinp, float* dweight, float* dbias, const bf16* dout, const bf16* inp,
                          const bf16* weight, int B, int C, int OC, Context& ctx, cudaStream_t stream, int ld,
                          bool accumulate) {
    backward_bf16(dinp, CUDA_R_32F, dweight, dbias, dout, inp, weight, B, C, OC, ctx, stream, ld, accumulate);
}

void matmul_backward_bf16_out(bf16* dinp, float* dweight, float* dbias, const bf16* dout, const bf16* inp,
                              const bf16* weight, int B, int C, int OC, Context& ctx, cudaStream_t stream, int ld,
                              bool accumulate) {
    CUDA_REQUIRE(dinp != nullptr);
    backward_bf16(dinp, CUDA_R_16BF, dweight, dbias, dout, inp, weight, B, C, OC, ctx, stream, ld, accumulate);
}

void matmul_forward_bf16_out(bf16* out, const bf16* inp, const bf16* weight, const float* bias, int B, int C, int OC,
                             float* staging, Context& ctx, cudaStream_t stream, int ld) {
    if (B <= 0 || OC <= 0) return;
    if (ld == 0) ld = OC;
    CUDA_REQUIRE(ld >= OC && (ld == OC || !bias));
    if (!bias) {  // nothing to add before the rounding: cuBLAS rounds its fp32 sums as it stores them
        const float one = 1.0f, zero = 0.0f;
        ctx.bind_blas(stream);
        CUBLAS_CHECK(cublasGemmEx(ctx.blas(), CUBLAS_OP_T, CUBLAS_OP_N, OC, B, C, &one, weight, CUDA_R_16BF, C, inp,
                                  CUDA_R_16BF, C, &zero, out, CUDA_R_16BF, ld, CUBLAS_COMPUTE_32F,
                                  CUBLAS_GEMM_DEFAULT));
        return;
    }
    // cuBLASLt's bf16 output; else fp32 (fused or separate bias) into staging, then rounded.
    const bool direct = matmul_forward_bf16_lt(out, true, inp, weight, bias, B, C, OC, ctx, stream);
    bool fused = direct;
    if (!direct) {
        fused = matmul_forward_bf16_lt(staging, false, inp, weight, bias, B, C, OC, ctx, stream);
        if (!fused) gemm_bf16_separate_bias(staging, inp, weight, bias, B, C, OC, ctx, stream);
        to_bf16(out, staging, (size_t)B * OC, stream);
    }
    ctx.count_bias_gemm(fused);
    ctx.count_out16_gemm(direct);
}

void matmul_forward_bf16_gelu(bf16* pre, bf16* out, const bf16* inp, const bf16* weight, const float* bias, int B,
                              int C, int OC, float* staging, Context& ctx, cudaStream_t stream) {
    if (B <= 0 || OC <= 0) return;
    const bool fused = bias && matmul_forward_bf16_lt(out, true, inp, weight, bias, B, C, OC, ctx, stream, pre);
    ctx.count_gelu_gemm(fused);
    if (fused) {  // the bias in the epilogue too
        ctx.count_bias_gemm(true);
        return;
    }
    matmul_forward_bf16(staging, inp, weight, bias, B, C, OC, ctx, stream);  // counts its bias GEMM
    gelu_forward_keep_bf16(pre, out, staging, (long)B * OC, stream);
}

void matmul_backward_bf16_gelu(bf16* dpre, float* dweight, float* dbias, const bf16* dout, const bf16* inp,
                               const bf16* weight, const bf16* pre, int B, int C, int OC, float* staging, Context& ctx,
                               cudaStream_t stream, bool accumulate) {
    if (B <= 0) return no_rows(dweight, dbias, C, OC, accumulate, stream);
    const bool fused = matmul_dinp_dgelu_lt(dpre, dout, weight, pre, B, C, OC, ctx, stream);
    ctx.count_dgelu_gemm(fused);
    // dweight and dbias as matmul_backward_bf16; dinp only where the epilogue did not take it.
    matmul_backward_bf16(fused ? nullptr : staging, dweight, dbias, dout, inp, weight, B, C, OC, ctx, stream, 0,
                         accumulate);
    if (!fused) gelu_backward_bf16(dpre, pre, staging, (long)B * C, stream);
}

void to_bf16(bf16* dst, const float* src, size_t n, cudaStream_t stream) {
    if (n == 0) return;
    to_bf16_kernel<<<grid_for((long)n, 256), 256, 0, stream>>>(dst, src, n);
    CUDA_CHECK(cudaGetLastError());
}

void round_bf16(float* dst, const float* src, size_t n, cudaStream_t stream) {
    if (n == 0) return;
    round_bf16_kernel<<<grid_for((long)n, 256), 256, 0, stream>>>(dst, src, n);
    CUDA_CHECK(cudaGetLastError());
}

} // namespace dptrain::cuda
