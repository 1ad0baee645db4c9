// Tensor ops of the CPU backend, the reference every other backend is tested against. Raw
// pointers and explicit shapes (llm.c style); backward takes gradient outputs first and
// accumulates into weight gradients (+=), so callers zero gradients once per step.
// Not for: owning memory or parameters (model.h), or anything that knows MPI or HDF5.
#pragma once

namespace dptrain::cpu {

// Compute threads for OpenBLAS and OpenMP in this process.
void set_threads(int n);
int get_threads();
// Cores this process may run on (its CPU affinity; mpirun binds ranks to cores by default), and
// whether that is fewer than the machine has (the process is bound).
int usable_cores(bool* bound = nullptr);

// out = inp @ weight^T + bias.  out (B, OC), inp (B, C), weight (OC, C), bias (OC) or null.
void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int B, int C,
                    int OC);
// dinp = dout @ weight (written; skipped when dinp is null); dweight += dout^T @ inp;
// dbias += column sums of dout (skipped when null).  dout (B, OC), the rest as above.
void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int B, int C, int OC);

// Elementwise activations over N values. backward writes dinp = dout * f'(inp).
void relu_forward(float* out, const float* inp, long N);
void relu_backward(float* dinp, const float* inp, const float* dout, long N);
// GELU, tanh approximation (as GPT-2).
void gelu_forward(float* out, const float* inp, long N);
void gelu_backward(float* dinp, const float* inp, const float* dout, long N);

// Row-wise softmax and cross-entropy. losses (B), probs (B, V), logits (B, V), targets (B).
void softmax_crossentropy_forward(float* losses, float* probs, const float* logits, const int* targets,
                                  int B, int V);
// dlogits = (probs - onehot(targets)) * scale  (scale = 1 / global batch for a mean loss).
void softmax_crossentropy_backward(float* dlogits, const float* probs, const int* targets, float scale,
                                   int B, int V);

} // namespace dptrain::cpu
