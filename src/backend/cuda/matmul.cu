// matmul_forward / matmul_backward in fp32 and their bf16 forms through cuBLAS, plus the
// float -> bf16 conversion that feeds it. cuBLAS is column-major: a row-major (R, K) matrix is
// its column-major transpose, so out = inp @ W^T becomes out^T = W @ inp^T (llm.c's mapping).
// The bf16 forward adds its bias in cuBLASLt's epilogue where cuBLASLt offers an algorithm (one
// write of the output instead of a fill, a read and a write), the bf16 weight-gradient GEMM sums
// the bias gradient in its own (dout read once instead of twice), and the GPT's fc GEMM and the
// dinp GEMM after GELU take GELU's forward and backward into theirs; everything else does these in
// separate passes. Not for: choosing precision (the caller converts).
#include "dptrain/backend/cuda/ops.h"

#include "check.h"
#include "column_sums.cuh"

#include <cublasLt.h>

#include <cstdint>
#include <cstdio>
#include <deque>

namespace dptrain::cuda {

// out (B, OC) rows set to bias: the GEMM then accumulates onto it with beta = 1, the same
// order of operations as the CPU (out = bias; out += inp @ W^T).
__global__ void fill_bias_kernel(float* out, const float* bias, long n, int OC) {
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x)
        out[i] = bias[i % OC];
}

// dbias (OC) += column sums of dout (B, OC), in column_sums' fixed order (no float atomics: the
// same result on every run).
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

// The weight and bias gradients of no rows where the caller asked for them written (accumulate
// false): 0. Added to (accumulate true), they stay as they are.
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

// The start of a forward GEMM: out is filled with the bias (the GEMM then adds onto it, beta 1,
// as the CPU does) or left for the GEMM to overwrite (beta 0); the handle is bound to the stream.
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
    // dweight^T (C, OC) += inp^T (C, B) @ dout (B, OC); beta = 1 accumulates as the CPU does (0:
    // written, dweight not read).
    CUBLAS_CHECK(cublasSgemm(ctx.blas(), CUBLAS_OP_N, CUBLAS_OP_T, C, OC, B, &one, inp, C, dout, OC, &beta, dweight,
                             C));
    if (dbias) bias_gradient(dbias, dout, B, OC, ctx, stream, accumulate);
}

// ---- cuBLASLt's epilogues: the bias, its gradient, GELU and GELU's gradient --------------------
// Four descriptors (bf16 x bf16 summed in fp32), one per kind of GEMM:
// - bias: the forward (the weight transposed, epilogue BIAS: out = acc + bias, fp32 or bf16 out);
// - bgrad: the weight-gradient GEMM (dout transposed, fp32 dweight accumulated with beta = 1, or
//   written with beta = 0,
//   epilogue BGRADB: the bias gradient, the column sums of dout, written to a vector of its own);
// - gelu: the forward with GELU after it (GELU_AUX_BIAS: pre = acc + bias, rounded to bf16, into
//   the auxiliary matrix, and out = GELU(acc + bias), rounded to bf16);
// - dgelu: dinp = dout @ W of the matmul that took GELU's output (epilogue DGELU: each value times
//   GELU's derivative at pre, read from the auxiliary matrix, rounded to bf16 as it is stored).
// Per GEMM, shape and operand alignment, the algorithm cuBLASLt's heuristic picked, or the note
// that it had none (then the separate passes run). A plan is made the first time its key is seen
// (the first step, the first evaluation batch, a short last batch); after that a GEMM looks it up
// and allocates nothing.
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

// The largest power of two up to 256 that divides the address: cuBLASLt's heuristic filters its
// algorithms by the operands' alignment.
static int alignment(const void* p) {
    uintptr_t a = (uintptr_t)p;
    int align = 1;
    while (align < 256 && a % (2 * align) == 0) align *= 2;
    return align;
}

// GELU's input, the auxiliary matrix of the gelu and dgelu epilogues, has the output's layout:
// (OC, B) for the forward, (C, B) for dinp; its leading dimension in values.
static int64_t aux_ld(const LtKey& key) { return key.kind == LtKind::gelu ? key.OC : key.C; }

// The pointers a GEMM's epilogue reads or writes, set on its kind's descriptor before the
// heuristic (which checks their alignment) and before each call (the descriptor is shared).
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

// The plan for key (bias: the bias, or the bias gradient's vector; aux: GELU's input; each null
// where the kind has none, and its alignment in the key).
static LtPlan& lt_plan(Context& ctx, const LtKey& key, const void* bias, const void* aux) {
    LtPlans& lp = *ctx.lt_plans();
    for (LtPlan& p : lp.plans)
        if (p.key == key) return p;
    LtPlan p{key, false, nullptr, nullptr, nullptr, {}};
    const int B = key.B, C = key.C, OC = key.OC;
    const cudaDataType_t out_type = key.out16 ? CUDA_R_16BF : CUDA_R_32F;
    // Column-major, as cuBLAS sees the row-major buffers. Forward (bias, gelu): the weight (C, OC)
    // used transposed, the input (C, B), the output (OC, B), fp32 or bf16 (rounded from the fp32
    // sum plus the bias). Weight gradient: the input (C, B), dout (OC, B) used transposed, dweight
    // (C, OC). dinp (dgelu): the weight (C, OC), dout (OC, B), dinp (C, B) in bf16.
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
    // The bias and aux pointers are part of what the heuristic checks (their alignment); 16 bytes
    // at least, else the separate passes, as some epilogue kernels load them in 16-byte vectors.
    // The auxiliary matrix's leading dimension must be a multiple of 8 (cuBLASLt's rule).
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
        // No algorithm (not supported for this shape, alignment or output type, or any other
        // refusal of the heuristic) is an answer, not an error: the separate pass, always valid.
        // Some combinations here are not in cuBLASLt's documented tables (an fp32 bias with a bf16
        // output), so the algorithm found is checked against the whole descriptor too
        // (cublasLtMatmulAlgoCheck), and with the workspace it needs within ours.
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

// What a plan is, for messages: its epilogue, output type and shape.
static std::string lt_what(const LtKey& k) {
    static const char* const kinds[] = {"bias", "bias gradient", "bias and GELU", "GELU's backward"};
    return strfmt("the %s epilogue, %s output, B=%d C=%d OC=%d", kinds[(int)k.kind], k.out16 ? "bf16" : "fp32", k.B,
                  k.C, k.OC);
}

// A cuBLASLt call's status: true if it ran. A refusal of the plan's algorithm at the call (not
// supported, or a value it does not take; nothing queued then) marks the plan unusable, says so
// once per plan and process on stderr, and returns false, so the caller runs the unfused form,
// which computes the same thing (the counters and bench_ops show which ran); any other status is
// fatal.
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

// The bf16 GEMM with the bias in the epilogue, into fp32 or bf16 (out16) outputs, and with GELU
// after it where pre (GELU's input, bf16; out16 then) is given; false (nothing queued) where
// cuBLASLt has no algorithm for it, or the epilogues are off, or the stream is not the context's
// (whose workspace it uses).
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

// dpre (B, C) bf16 = (dout @ weight) times GELU's derivative at pre (B, C, bf16), in one GEMM
// (epilogue DGELU); false (nothing queued) where cuBLASLt has no algorithm, or the epilogues are
// off, or the stream is not the context's.
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

// The bf16 weight-gradient GEMM (dweight += inp^T dout; accumulate false: =) with the bias gradient
// in the epilogue: cuBLASLt writes the column sums of dout into the context's reduction scratch,
// and a small pass adds them onto dbias (dbias +=, or =, as on the column-sum path). False (nothing
// queued) where cuBLASLt has no algorithm, or the epilogues are off, or the stream is not the
// context's.
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

// The bf16 forward with the bias as a separate pass (filled first, the GEMM adding onto it).
static void gemm_bf16_separate_bias(float* out, const bf16* inp, const bf16* weight, const float* bias, int B, int C,
                                    int OC, Context& ctx, cudaStream_t stream) {
    float one = 1.0f, beta = begin_forward(out, bias, B, OC, ctx, stream);
    // The fp32 mapping with bf16 operands: bf16 x bf16 products are exact in fp32 and summed in
    // fp32 (CUBLAS_COMPUTE_32F), so the only precision lost is the rounding of the inputs.
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

// Both backward forms: dinp of type dinp_type (fp32, or bf16 rounded by cuBLAS as it stores its
// fp32 sums), or null.
static void backward_bf16(void* dinp, cudaDataType_t dinp_type, float* dweight, float* dbias, const bf16* dout,
                          const bf16* inp, const bf16* weight, int B, int C, int OC, Context& ctx, cudaStream_t stream,
                          int ld, bool accumulate) {
    if (B <= 0) return no_rows(dweight, dbias, C, OC, accumulate, stream);
    if (ld == 0) ld = OC;
    CUDA_REQUIRE(ld >= OC && (ld == OC || !dbias));
    float one = 1.0f, zero = 0.0f, beta = accumulate ? 1.0f : 0.0f;
    ctx.bind_blas(stream);
    // The fp32 mapping of matmul_backward with bf16 operands and fp32 sums.
    if (dinp)
        CUBLAS_CHECK(cublasGemmEx(ctx.blas(), CUBLAS_OP_N, CUBLAS_OP_N, C, B, OC, &one, weight, CUDA_R_16BF, C, dout,
                                  CUDA_R_16BF, ld, &zero, dinp, dinp_type, C, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    // dweight, and the bias gradient in the same GEMM's epilogue where cuBLASLt has an algorithm
    // (dout read once), else column sums in a pass of their own.
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
    // cuBLASLt's bf16 output with an fp32 bias; else its fp32 output with the bias (or the separate
    // pass) into the staging, then rounded: one more pass over the output. Counted once each way.
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
    // dweight and dbias as matmul_backward_bf16 sums them; dinp there only where the epilogue did
    // not take GELU's backward (into the staging, then gelu_backward_bf16).
    matmul_backward_bf16(fused ? nullptr : staging, dweight, dbias, dout, inp, weight, B, C, OC, ctx, stream, 0,
                         accumulate);
    if (!fused) gelu_backward_bf16(dpre, pre, staging, (long)B * C, stream);
}

void to_bf16(bf16* dst, const float* src, size_t n, cudaStream_t stream) {
    if (n == 0) return;
    to_bf16_kernel<<<grid_for((long)n, 256), 256, 0, stream>>>(dst, src, n);
    CUDA_CHECK(cudaGetLastError());
}

} // namespace dptrain::cuda
