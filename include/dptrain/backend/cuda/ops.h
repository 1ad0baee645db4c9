// CUDA twins of the CPU ops (backend.h) and optimizer updates (optim.h): same names, same argument
// order and shapes, every pointer a device pointer, and a trailing stream the work is queued on.
// Not for: allocating, synchronising or copying to the host (no op does: scratch comes from the
// caller, or from the Context, which the models size at construction; an op given a Context
// too small for it grows the scratch once, with a device-wide wait), or deciding what runs where.
// Compiles without CUDA headers so host code can include it.
#pragma once

#include "dptrain/core/bf16.h"

#include <cstddef>
#include <string>
#include <vector>

// The runtime's own spelling (driver_types.h): repeating an identical typedef is legal C++.
struct CUstream_st;
typedef struct CUstream_st* cudaStream_t;
struct cublasContext;    // cublasHandle_t is `cublasContext*`
struct cublasLtContext;  // cublasLtHandle_t is `cublasLtContext*`

namespace dptrain::cuda {

// ---- Devices ----------------------------------------------------------------------------------

// CUDA devices this process can see (cudaGetDeviceCount honours CUDA_VISIBLE_DEVICES). Returns 0
// and, when why is given, the reason (no driver, no device, none visible) instead of failing:
// callers decide whether a missing GPU is an error. Never throws, never aborts.
int device_count(std::string* why = nullptr);

// The UserError text for a node with more ranks than GPUs; `visible` is CUDA_VISIBLE_DEVICES (""
// when unset) and `why` device_count's reason when it found none. Pure, for tests.
std::string device_shortage_message(int local_size, int gpus, const std::string& visible, const std::string& why);

// Makes GPU local_rank the current device of this process and returns it: local_rank and
// local_size count the ranks on this host (Topology::host_rank, host_size; the same as the node's
// unless nodes are simulated). Throws UserError when the host has more ranks than visible GPUs, or
// local_rank is outside [0, local_size).
int bind_device(int local_rank, int local_size);

struct LtPlans;  // cuBLASLt algorithms by GEMM shape (src/cuda/matmul.cu)

// One device's cuBLAS handle and stream, created once and passed to the ops that need cuBLAS (no
// process-wide handle, so tests and several devices stay independent). Construct it after
// bind_device; it makes `device` current. Not copyable: it owns what it creates.
class Context {
  public:
    explicit Context(int device);
    ~Context();
    Context(const Context&) = delete;
    Context& operator=(const Context&) = delete;

    int device() const { return device_; }
    cudaStream_t stream() const { return stream_; }
    cublasContext* blas() const { return blas_; }
    // Queues the handle's next calls on `stream`. On the context's own stream cuBLAS uses the
    // workspace allocated here; on any other it falls back to cuBLAS's per-stream default pool
    // (cublasSetStream resets the workspace, so two streams never share one scratch buffer).
    void bind_blas(cudaStream_t stream);

    // cuBLASLt, for GEMMs with a fused epilogue (the bf16 forward's bias, the bf16 weight-gradient
    // GEMM's bias gradient, GELU and its gradient): its handle, the workspace above (cuBLASLt takes
    // it per call, so only on the context's own stream), and the algorithms found per shape, made
    // as each shape is first seen (src/cuda/matmul.cu).
    cublasLtContext* lt() const { return lt_; }
    void* workspace() const { return workspace_; }
    size_t workspace_bytes() const { return workspace_bytes_; }
    LtPlans* lt_plans() const { return lt_plans_; }
    // On (the default): bf16 forward GEMMs add the bias, bf16 weight-gradient GEMMs sum the bias
    // gradient, and the GEMMs before and after GELU take its forward and backward, in cuBLASLt's
    // epilogues where cuBLASLt has an algorithm for the shape; off: always as separate passes
    // (bench_ops times both; the tests run both).
    void set_epilogues(bool on) { epilogues_ = on; }
    bool epilogues() const { return epilogues_; }
    // Device scratch of at least n floats for the column sums of the bias and LayerNorm gradients
    // (column_sums_scratch says how much), and the OC floats of a bias gradient from cuBLASLt's
    // epilogue before they are added on. Grown the first time a larger one is asked for (after a
    // device-wide wait), so a model asks at construction for its largest and no step grows it.
    // One stream at a time: ops that use it must not run concurrently on two streams.
    float* reduction_scratch(size_t n);
    // bf16 forward GEMMs with a bias so far: with the epilogue, and with the separate pass.
    long fused_bias_gemms() const { return fused_bias_gemms_; }
    long unfused_bias_gemms() const { return unfused_bias_gemms_; }
    void count_bias_gemm(bool fused) { ++(fused ? fused_bias_gemms_ : unfused_bias_gemms_); }
    // matmul_forward_bf16_out calls with a bias so far: written as bf16 by cuBLASLt, and through
    // fp32 staging and a rounding pass (8 bytes more per output value than the direct form: an
    // fp32 write and read).
    long direct_out16_gemms() const { return direct_out16_gemms_; }
    long staged_out16_gemms() const { return staged_out16_gemms_; }
    void count_out16_gemm(bool direct) { ++(direct ? direct_out16_gemms_ : staged_out16_gemms_); }
    // bf16 weight-gradient GEMMs with a bias gradient so far: in cuBLASLt's epilogue (BGRADB), and
    // as column sums in a pass of their own.
    long fused_bias_grads() const { return fused_bias_grads_; }
    long unfused_bias_grads() const { return unfused_bias_grads_; }
    void count_bias_grad(bool fused) { ++(fused ? fused_bias_grads_ : unfused_bias_grads_); }
    // matmul_forward_bf16_gelu calls so far: GELU in cuBLASLt's epilogue (GELU_AUX_BIAS), and as
    // matmul_forward_bf16 into fp32 staging followed by gelu_forward_keep_bf16.
    long fused_gelu_gemms() const { return fused_gelu_gemms_; }
    long unfused_gelu_gemms() const { return unfused_gelu_gemms_; }
    void count_gelu_gemm(bool fused) { ++(fused ? fused_gelu_gemms_ : unfused_gelu_gemms_); }
    // matmul_backward_bf16_gelu calls so far: GELU's backward in the dinp GEMM's epilogue (DGELU),
    // and through fp32 staging and gelu_backward_bf16.
    long fused_dgelu_gemms() const { return fused_dgelu_gemms_; }
    long unfused_dgelu_gemms() const { return unfused_dgelu_gemms_; }
    void count_dgelu_gemm(bool fused) { ++(fused ? fused_dgelu_gemms_ : unfused_dgelu_gemms_); }

  private:
    int device_ = 0;
    cudaStream_t stream_ = nullptr;
    cublasContext* blas_ = nullptr;
    cublasLtContext* lt_ = nullptr;
    LtPlans* lt_plans_ = nullptr;
    bool epilogues_ = true;
    long fused_bias_gemms_ = 0, unfused_bias_gemms_ = 0, direct_out16_gemms_ = 0, staged_out16_gemms_ = 0;
    long fused_bias_grads_ = 0, unfused_bias_grads_ = 0, fused_gelu_gemms_ = 0, unfused_gelu_gemms_ = 0;
    long fused_dgelu_gemms_ = 0, unfused_dgelu_gemms_ = 0;
    float* reduction_ = nullptr;
    size_t reduction_n_ = 0;
    void* workspace_ = nullptr;       // cuBLAS scratch, workspace_bytes_ on device_
    size_t workspace_bytes_ = 0;
    cudaStream_t blas_stream_ = nullptr;  // the stream blas_ is bound to now
};

// Page-locks host memory [p, p + bytes) in place (cudaHostRegister) until destroyed, so that copies
// between it and a device run as DMA at full speed and asynchronously. When it cannot (no driver,
// a locked-memory limit), the memory stays pageable, copies still work, only slower, and why()
// says so. Not copyable.
class PinnedHost {
  public:
    PinnedHost(void* p, size_t bytes);
    ~PinnedHost();
    PinnedHost(const PinnedHost&) = delete;
    PinnedHost& operator=(const PinnedHost&) = delete;
    bool ok() const { return ok_; }
    const std::string& why() const { return why_; }

  private:
    void* p_ = nullptr;
    bool ok_ = false;
    std::string why_;
};

// A model computed on a GPU that can keep its parameters and gradients there (CudaMlp, CudaGpt).
// Resident: forward uses the device parameters as they are (the host pointer it is given is not
// read) and backward leaves the gradients on the device, queued on the context's stream (the host
// buffer is not written; the hook hears of each layer as its gradients are queued). The trainer's
// DeviceStep (device_step.h) then all-reduces and updates them in place.
class Resident {
  public:
    virtual ~Resident() = default;
    void set_resident(bool on) { resident_ = on; }
    virtual float* device_params() = 0;
    virtual float* device_grads() = 0;
    virtual Context& context() = 0;
    // bf16 (else null): the model's copy of its parameters rounded to bf16, which its matmuls take.
    // Each forward rounds the parameters into it first, unless set_rounded_current(true) was called
    // since the last forward: an update that wrote the copy with the parameters (DeviceStep), so
    // that it holds their rounding already. false: it may not (the parameters were written alone).
    virtual bf16* rounded_params() = 0;
    virtual void set_rounded_current(bool current) = 0;

    // A step's gradients begin (--grad-accum, resident): the next backward writes each gradient
    // (its first writer's accumulate false, no zeroing pass), and every backward after it adds to
    // them, until the next call: a step's micro-batches summed on the device, as the host path
    // sums them into its zeroed buffer. Before the first call every backward writes them.
    void begin_gradients() { backwards_ = 0; }

  protected:
    // backward asks once a call: whether this one adds to the device's gradients (resident only:
    // otherwise each backward's gradients are written and then added to the host's buffer).
    bool backward_adds() {
        const bool adds = resident_ && backwards_ > 0;
        if (backwards_ >= 0) ++backwards_;
        return adds;
    }
    bool resident_ = false;

  private:
    long backwards_ = -1;  // backwards since begin_gradients(); -1: never called
};

// ---- Ops (shapes as in backend.h; llm.c names: B batch, T time, C channels, NH heads) ---------

// out (B, OC) = inp (B, C) @ weight (OC, C)^T + bias (OC, or null). fp32 sgemm (no TF32).
void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int B, int C, int OC,
                    Context& ctx, cudaStream_t stream);
// The same product with each output summed in an order fixed by C alone (matmul_rows.cu): a row's
// bits do not depend on how many rows the call has or where the row is among them (cuBLAS's do).
// For decoding, where a request's answer must not depend on what it was batched with.
void matmul_forward_rows(float* out, const float* inp, const float* weight, const float* bias, int B, int C, int OC,
                         cudaStream_t stream);
// The same with bf16 weights, widened exactly as they are read: the fp32 form's bits on the widened
// weights, from half the bytes (decoding with --precision bf16). The CPU twin's overload of the name.
void matmul_forward_rows(float* out, const float* inp, const bf16* weight, const float* bias, int B, int C, int OC,
                         cudaStream_t stream);
// dinp (B, C) = dout @ weight (written; skipped when null); dweight (OC, C) += dout^T @ inp;
// dbias (OC) += column sums of dout (skipped when null), summed in a fixed order.
// accumulate false (here and in every op below that takes it): the weight and bias gradients are
// written, = instead of +=, what adding onto zeros gives (a GEMM with beta 0, which neither reads
// them nor needs them zeroed first; B = 0 writes zeros), for a gradient's first writer.
void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int B, int C, int OC, Context& ctx, cudaStream_t stream,
                     bool accumulate = true);
// Floats of Context::reduction_scratch that the bias gradient (one sum per column) or LayerNorm's
// weight and bias gradients (two) over N rows of C columns use.
size_t column_sums_scratch(long N, int C, int sums);
// Mixed precision: out (B, OC) fp32 = inp (B, C) bf16 @ weight (OC, C) bf16 ^T + bias (OC) fp32
// or null; products and sums in fp32 on the tensor cores (CUBLAS_COMPUTE_32F). The bias is added
// in cuBLASLt's epilogue where it can be (Context::epilogues), else by filling out first.
void matmul_forward_bf16(float* out, const bf16* inp, const bf16* weight, const float* bias, int B, int C, int OC,
                         Context& ctx, cudaStream_t stream);
// The same product rounded to bf16 as it is stored, out (B, OC) bf16: with a bias, through
// cuBLASLt with the bias in its epilogue and a bf16 output where it has an algorithm, else
// matmul_forward_bf16 into `staging` (B * OC floats) and to_bf16; without one, cuBLAS writes bf16
// itself (cublasGemmEx; staging unused, may be null). For a matmul whose output is kept as bf16
// (the GPT's qkv under flash attention, and its classifier). With a bias, the context counts it
// once as a bias GEMM, fused if either epilogue ran, and once as a bf16-output GEMM, direct or
// staged (through `staging` and to_bf16); without one, not at all (there is no other path).
// ld: out's row stride in values (0: OC), more than OC only without a bias: rows padded to a
// multiple of 8 values keep every row 16-byte aligned, which the tensor-core kernels' loads and
// stores want (the GPT's logits, V = 50257 columns).
void matmul_forward_bf16_out(bf16* out, const bf16* inp, const bf16* weight, const float* bias, int B, int C, int OC,
                             float* staging, Context& ctx, cudaStream_t stream, int ld = 0);
// matmul_backward with bf16 operands (dout, inp and weight rounded by the caller) and fp32 results:
// dinp written, dweight += and dbias += (the column sums of the bf16 dout) in fp32. The bias
// gradient is summed in the weight-gradient GEMM's epilogue (cuBLASLt's BGRADB) where cuBLASLt has
// an algorithm and Context::epilogues is on, else as column sums in a fixed order; both sum
// the same values in fp32, in different orders. ld: dout's row stride (0: OC), more than OC only
// without a bias gradient (the GPT's padded logits' gradient, as matmul_forward_bf16_out's ld).
void matmul_backward_bf16(float* dinp, float* dweight, float* dbias, const bf16* dout, const bf16* inp,
                          const bf16* weight, int B, int C, int OC, Context& ctx, cudaStream_t stream, int ld = 0,
                          bool accumulate = true);
// The same with dinp (B, C) rounded to bf16 as it is stored (cuBLAS rounds its fp32 sums), for an
// input gradient that only feeds an op reading it as bf16 (the GPT's LayerNorm backward, and flash
// attention's backward): half the bytes written and read again. Its fp32 sums may come in another
// order than matmul_backward_bf16's (cuBLAS picks its kernels by output type), so its values are
// the fp32 form's rounded within the tolerance of fp32 sums, not bit for bit.
void matmul_backward_bf16_out(bf16* dinp, float* dweight, float* dbias, const bf16* dout, const bf16* inp,
                              const bf16* weight, int B, int C, int OC, Context& ctx, cudaStream_t stream, int ld = 0,
                              bool accumulate = true);
// The GPT's fc matmul with GELU after it, in bf16: with x = inp @ weight^T + bias in fp32, pre
// (B, OC) bf16 = x rounded, GELU's input kept for backward, and out (B, OC) bf16 = GELU(x)
// rounded, the next matmul's input (GELU of the unrounded sum, as the CPU Gpt takes it). Where
// cuBLASLt has an algorithm for its GELU_AUX_BIAS epilogue (Context::epilogues on), one GEMM
// writes both, with cuBLASLt's own GELU; else matmul_forward_bf16 into `staging` (B * OC floats)
// and gelu_forward_keep_bf16 from it. The two differ by the GEMMs' orders of summation and by what
// separates cuBLASLt's GELU from the tanh approximation (the fallback's tanhf and the CPU's
// tanh_approx agree to about 1e-6). Counted (Context::fused_gelu_gemms), and,
// with a bias, once as a bias GEMM.
void matmul_forward_bf16_gelu(bf16* pre, bf16* out, const bf16* inp, const bf16* weight, const float* bias, int B,
                              int C, int OC, float* staging, Context& ctx, cudaStream_t stream);
// matmul_backward_bf16 of the matmul that took GELU's output, with GELU's backward: dpre (B, C) bf16
// = (dout @ weight) * GELU'(pre), rounded as it is stored (pre: GELU's input, B x C bf16), the
// gradient the fc matmul's backward takes; dweight and dbias as matmul_backward_bf16. Where
// cuBLASLt has an algorithm for its DGELU epilogue, the dinp GEMM applies GELU's derivative (its
// own) as it stores; else dinp goes to `staging` (B * C floats, fp32) and gelu_backward_bf16
// writes dpre from it, the CPU's order. dpre must not overlap dout, inp, pre or staging. Counted
// (Context::fused_dgelu_gemms).
void matmul_backward_bf16_gelu(bf16* dpre, float* dweight, float* dbias, const bf16* dout, const bf16* inp,
                               const bf16* weight, const bf16* pre, int B, int C, int OC, float* staging, Context& ctx,
                               cudaStream_t stream, bool accumulate = true);
// dst (n) = src (n) rounded to bf16, nearest even, NaN kept NaN: bit-identical to to_bf16 (bf16.h).
void to_bf16(bf16* dst, const float* src, size_t n, cudaStream_t stream);
// dst (n) = src (n) widened to fp32 (exact): from_bf16 (bf16.h).
void from_bf16(float* dst, const bf16* src, size_t n, cudaStream_t stream);

// Elementwise over N values; backward writes dinp = dout * f'(inp). GELU: tanh approximation.
void relu_forward(float* out, const float* inp, long N, cudaStream_t stream);
void relu_backward(float* dinp, const float* inp, const float* dout, long N, cudaStream_t stream);
void gelu_forward(float* out, const float* inp, long N, cudaStream_t stream);
void gelu_backward(float* dinp, const float* inp, const float* dout, long N, cudaStream_t stream);
// GELU's bf16 forms (--precision bf16's GPT). Forward from the fc matmul's fp32 output: pre = inp
// rounded to bf16 (kept for backward) and out = GELU(inp) rounded (fcproj's input), to_bf16 of inp
// and of gelu_forward's out, bit for bit: GELU of the unrounded value, as the fc GEMM's GELU
// epilogue takes it. Backward from pre (bf16, widened exactly) and the fp32 dout: dinp rounded to
// bf16 as it is stored (fc's output gradient), the fp32 form's result on the widened input,
// rounded, bit for bit; dinp is a separate buffer.
void gelu_forward_keep_bf16(bf16* pre, bf16* out, const float* inp, long N, cudaStream_t stream);
void gelu_backward_bf16(bf16* dinp, const bf16* inp, const float* dout, long N, cudaStream_t stream);

// losses (B), stats (B, 2) (the max and 1 / sum per row) and argmax (B, or null: the first largest
// logit) from logits (B, V) and targets (B); the probabilities are not kept.
void softmax_crossentropy_forward(float* losses, float* stats, int* argmax, const float* logits, const int* targets,
                                  int B, int V, cudaStream_t stream);
// dlogits (B, V) = (softmax(logits) - onehot(targets)) * scale, from the forward's stats; dlogits
// may be logits (in place).
void softmax_crossentropy_backward(float* dlogits, const float* logits, const float* stats, const int* targets,
                                   float scale, int B, int V, cudaStream_t stream);
// The bf16 forms (--precision bf16's GPT): the logits read as bf16 (the classifier matmul's output,
// rounded as it was stored), what the fp32 forms compute on the widened values, bit for bit; dlogits
// rounded to bf16 as they are stored (to_bf16 of the fp32 form's), into a buffer of their own, for
// the classifier's matmul. Rows `stride` values apart (V or more; the values past V in each row
// are neither read nor written), for both logits and dlogits.
void softmax_crossentropy_forward_bf16(float* losses, float* stats, int* argmax, const bf16* logits,
                                       const int* targets, int B, int V, int stride, cudaStream_t stream);
void softmax_crossentropy_backward_bf16(bf16* dlogits, const bf16* logits, const float* stats, const int* targets,
                                        float scale, int B, int V, int stride, cudaStream_t stream);

// out (B,T,C) = wte (V,C)[inp] + wpe (maxT,C)[t]; inp (B,T) with row stride `stride` (>= T).
void encoder_forward(float* out, const int* inp, int stride, const float* wte, const float* wpe, int B, int T, int C,
                     cudaStream_t stream);
// Incremental decoding's rows (the twin of cpu::encoder_decode): out (n, C), row i = wte[tok[i]] +
// wpe[pos[i]]; tok and pos on the device.
void encoder_decode(float* out, const int* tok, const int* pos, const float* wte, const float* wpe, int n, int C,
                    cudaStream_t stream);
// dwte[inp] += dout, dwpe[t] += dout. Deterministic without atomics, and in the CPU's order
// (positions ascending per row of dwte), so the result equals the CPU's bit for bit. The positions
// are sorted by token in the context's reduction scratch.
void encoder_backward(float* dwte, float* dwpe, const float* dout, const int* inp, int stride, int B, int T, int C,
                      Context& ctx, cudaStream_t stream);
// Floats of Context::reduction_scratch that encoder_backward over B*T positions uses (on the
// current device: the sort's temporary storage is CUB's to size).
size_t encoder_backward_scratch(long BT);

// out (N, C), mean and rstd (N) kept for backward; eps 1e-5 as the CPU.
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias,
                       long N, int C, cudaStream_t stream);
// The same with out rounded to bf16 as it is stored: to_bf16 of layernorm_forward's out, bit for
// bit, and the same mean and rstd (for --precision bf16, where out only feeds a matmul).
void layernorm_forward_bf16(bf16* out, float* mean, float* rstd, const float* inp, const float* weight,
                            const float* bias, long N, int C, cudaStream_t stream);
// res = a + b, then layernorm_forward from res, in one launch (a and b read once, res written once
// and read back by the passes after the first): residual_forward followed by layernorm_forward,
// bit for bit. The bf16 form writes out rounded, as layernorm_forward_bf16 does.
void residual_layernorm_forward(float* res, float* out, float* mean, float* rstd, const float* a, const float* b,
                                const float* weight, const float* bias, long N, int C, cudaStream_t stream);
void residual_layernorm_forward_bf16(float* res, bf16* out, float* mean, float* rstd, const float* a, const float* b,
                                     const float* weight, const float* bias, long N, int C, cudaStream_t stream);
// dinp += ..., dweight (C) += ..., dbias (C) += ... (column sums in a fixed order, in the
// context's reduction scratch). accumulate false: dweight and dbias written, as matmul_backward's
// (dinp is added to either way: the residual stream's gradient).
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, long N, int C, Context& ctx,
                        cudaStream_t stream, bool accumulate = true);
// The same from dout in bf16 (for --precision bf16, where dout is a matmul's input gradient, which
// its backward writes rounded: matmul_backward_bf16_out): the fp32 form on the widened values, bit
// for bit.
void layernorm_backward(float* dinp, float* dweight, float* dbias, const bf16* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, long N, int C, Context& ctx,
                        cudaStream_t stream, bool accumulate = true);
// That, and dinp's new values rounded to bf16 into dinp16 (N, C) as they are stored: to_bf16 of
// layernorm_backward's dinp, bit for bit (where the residual stream's gradient is next the output
// gradient of a matmul).
void layernorm_backward_bf16(float* dinp, bf16* dinp16, float* dweight, float* dbias, const bf16* dout,
                             const float* inp, const float* weight, const float* mean, const float* rstd, long N,
                             int C, Context& ctx, cudaStream_t stream, bool accumulate = true);

// Causal self-attention. inp (B,T,3C) = q,k,v; out (B,T,C); att (B,NH,T,T) keeps the softmax.
// tf32: the products on the tensor cores with TF32 operands and fp32 sums (CUBLAS_COMPUTE_32F_
// FAST_TF32, for --precision bf16); otherwise plain fp32 GEMMs. The softmax is fp32 either way.
void attention_forward(float* out, float* att, const float* inp, int B, int T, int C, int NH, bool tf32, Context& ctx,
                       cudaStream_t stream);
// dinp (B,T,3C) written (not accumulated); datt (B,NH,T,T) scratch.
void attention_backward(float* dinp, float* datt, const float* dout, const float* inp, const float* att, int B, int T,
                        int C, int NH, bool tf32, Context& ctx, cudaStream_t stream);
// Attention of n new positions against a key/value cache (incremental decoding), the twin of
// cpu::attention_decode: qkv (n, 3C); row i is position pos[i] of cache slot slot[i] (slot and pos
// on the device); every row's k and v are written into kcache and vcache (slots, T, C) first, then
// row i attends to positions 0..pos[i] of its slot. out (n, C). fp32; T up to 12,284 (its scores
// and 4 floats of slack in the 48 KiB of shared memory a block has without opting in).
void attention_decode(float* out, float* kcache, float* vcache, const float* qkv, const int* slot, const int* pos,
                      int n, int T, int C, int NH, cudaStream_t stream);

// Causal self-attention without the T x T matrices (flash attention, for --attention flash): q,
// k, v, the softmax weights and the gradients enter the tensor cores as bf16, sums and softmax
// are fp32; the same tiles as cpu::flash_attention_forward. Head sizes of
// cpu::flash_attention_supported only. lse (B,NH,T) keeps each query's log-sum-exp for backward.
void flash_attention_forward(float* out, float* lse, const float* inp, int B, int T, int C, int NH,
                             cudaStream_t stream);
// The bf16 form (--precision bf16): from q, k, v already rounded to bf16 (the bits the fp32 form
// rounds them to as it loads them, so the same out and lse: half the reads; matmul_forward_bf16_out
// writes them), and out also rounded to bf16 into out16 (B,T,C) as it is stored (to_bf16 of out,
// bit for bit): the attention projection's input, without a pass of its own. out may be null
// (the GPT in bf16 keeps only out16: backward takes the output rounded). The kernels copy the bf16
// q, k, v tiles in 16-byte pieces, so inp must be 16-byte aligned (as cudaMalloc's are; refused
// otherwise), as must dout below.
void flash_attention_forward_bf16(float* out, bf16* out16, float* lse, const bf16* inp, int B, int T, int C, int NH,
                                  cudaStream_t stream);
// The shared memory per block its kernels ask for at this head size (up to 118.5 KiB at 128): a
// GPU whose opt-in limit is lower cannot run them (cudaDevAttrMaxSharedMemoryPerBlockOptin).
size_t flash_attention_shared_bytes(int C, int NH);
// dinp (B,T,3C) written (not accumulated); delta (B,NH,T) scratch; out and lse of the forward.
void flash_attention_backward(float* dinp, float* delta, const float* dout, const float* inp, const float* out,
                              const float* lse, int B, int T, int C, int NH, cudaStream_t stream);
// The bf16 form: from q, k, v already rounded to bf16, as the forward's, dout in bf16 (the
// projection's backward writes it so: matmul_backward_bf16_out) and out in bf16 (the forward's
// out16), as FlashAttention-2 takes them; dinp rounded to bf16 as it is stored, where it only feeds
// the qkv matmul's backward. The fp32 form's delta and dinp (rounded) on the widened dout and out,
// bit for bit: the kernels round dout as they load it anyway, so only delta, the sum of dout * out
// per query, sees the rounding.
void flash_attention_backward_bf16(bf16* dinp, float* delta, const bf16* dout, const bf16* inp, const bf16* out,
                                   const float* lse, int B, int T, int C, int NH, cudaStream_t stream);

// out = a + b over N values; backward: da += dout, db += dout.
void residual_forward(float* out, const float* a, const float* b, long N, cudaStream_t stream);
void residual_backward(float* da, float* db, const float* dout, long N, cudaStream_t stream);

// ---- Optimizer updates (optim.h), over n values of the flat buffers ------------------------------

// p -= lr * (mhat / (sqrt(vhat) + eps) + wd * p), bias-corrected moments; t counts from 1.
void adamw_update(float* p, const float* g, float* m, float* v, size_t n, float lr, float beta1, float beta2,
                  float eps, float wd, long t, cudaStream_t stream);
// buf = momentum * buf + g + wd * p;  p -= lr * buf.
void sgd_momentum_update(float* p, const float* g, float* buf, size_t n, float lr, float momentum, float wd,
                         cudaStream_t stream);

// The same updates over many views of one flat buffer in one launch (the optimizer's step has a
// view per tensor: 148 launches at GPT-2 124M otherwise): each chunk, at most kUpdateChunk values
// of one view, gets a block, and its values are updated exactly as the per-view ops update them
// (with wd, or with 0 where decay is 0), the same bits. chunks: device memory, from update_chunks.
// gscale: the clipping factor (1: none), taken as each gradient value is read, exactly as scale()
// followed by the update would take it (each product rounded on its own), so clipping costs no
// pass of its own; g itself is left as it is. p16 (or null): every parameter the update writes
// also written rounded to bf16 there, at its own index (to_bf16's bits), for a model's bf16
// matmuls (Resident::rounded_params): no pass of forward's own to round them.
struct UpdateChunk {
    size_t offset, size;
    unsigned decay;  // 1: the view takes weight decay
};
constexpr size_t kUpdateChunk = 1 << 16;
// The views ({offset, size, decay} each) cut into chunks, in order.
std::vector<UpdateChunk> update_chunks(const std::vector<UpdateChunk>& views);
void adamw_update_chunks(float* p, const float* g, float* m, float* v, const UpdateChunk* chunks, int n_chunks,
                         float lr, float beta1, float beta2, float eps, float wd, long t, float gscale,
                         cudaStream_t stream, bf16* p16 = nullptr);
void sgd_momentum_update_chunks(float* p, const float* g, float* buf, const UpdateChunk* chunks, int n_chunks,
                                float lr, float momentum, float wd, float gscale, cudaStream_t stream,
                                bf16* p16 = nullptr);

// The gradient norm's square: *out (one double on the device) = sum of x[i]^2 over n values, in
// double, in a fixed order (the same value on every run, rank and GPU). partial: kNormBlocks
// doubles of device scratch, one per block: enough blocks to keep every SM's loads in flight (the
// sum is a pass over the whole gradient, 0.5 GB at GPT-2 124M). The CPU twin is global_norm
// (optim.h), squared; it sums in another order.
constexpr int kNormBlocks = 1024;
void sum_squares(double* out, double* partial, const float* x, size_t n, cudaStream_t stream);
// x *= s over n values, each product rounded on its own: bit-identical to clip_grad_norm's scaling.
void scale(float* x, float s, size_t n, cudaStream_t stream);

} // namespace dptrain::cuda
