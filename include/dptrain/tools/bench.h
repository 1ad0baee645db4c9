// dptrain-bench's measurements, each beside its real peer in the same run; collective over the
// world, each returning the exit code. Not for: recording results (docs/BENCHMARKS.md).
#pragma once

namespace dptrain {

int bench_allreduce(int argc, char** argv);
int bench_io(int argc, char** argv);
int bench_trace(int argc, char** argv);
int bench_tokenizer(int argc, char** argv);
int bench_matmul(int argc, char** argv);
int bench_products(int argc, char** argv);
int bench_decode(int argc, char** argv);
const char* bench_usage();

} // namespace dptrain
