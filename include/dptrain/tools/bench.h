// dptrain-bench's measurements, each beside its real peer in the same run (the tool's main
// dispatches on the first argument). Collective over MPI_COMM_WORLD; each returns the exit code.
//   allreduce  every all-reduce algorithm beside Open MPI's MPI_Allreduce (nccl-tests' format)
//   io         every reader beside a raw sequential read of the same shards, page cache dropped
//   trace      what the step instrumentation costs
//   tokenizer  GPT-2's BPE and SentencePiece: encode and decode MB/s on one core (peers: bench/tokenizer.sh)
//   matmul     the CPU matmul_forward of few rows (decoding) beside one OpenBLAS sgemm
//   products   an MLP step's products whole and in micro-batches, beside bare sgemm calls
//   decode     the CPU decoder with fp32 beside bf16 weights: tokens/s, and their answers
#pragma once

namespace dptrain {

int bench_allreduce(int argc, char** argv);
int bench_io(int argc, char** argv);
int bench_trace(int argc, char** argv);
int bench_tokenizer(int argc, char** argv);
int bench_matmul(int argc, char** argv);
int bench_products(int argc, char** argv);
int bench_decode(int argc, char** argv);
// The usage lines of all of them, for any argument the tool does not take.
const char* bench_usage();

} // namespace dptrain
