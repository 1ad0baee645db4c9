// The memory plan's formulas against what the models allocate (parameters, activations, bf16
// operands), and the plan's arithmetic: sharding divides the optimizer state, recomputation
// shrinks the activations, the largest micro-batch is the largest that fits, a GPU budget bounds
// the GPU's parts alone, a GPU's plan takes the CUDA model's sizes; and the sizes people write.
#include "dptrain/backend/gpu_sizes.h"
#include "dptrain/backend/gradient_path.h"
#include "dptrain/config/options.h"
#include "dptrain/core/error.h"
#include "dptrain/core/memory.h"
#include "dptrain/model/gpt.h"
#include "dptrain/model/llama.h"
#include "dptrain/model/model.h"
#include "dptrain/train/memory_plan.h"

#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

using namespace dptrain;

TEST_CASE("MLP and GPT sizes without building them equal what they allocate", "[plan]") {
    for (Precision prec : {Precision::fp32, Precision::bf16}) {
        Mlp m(13, {32, 17}, 5, Activation::relu, 40);
        m.set_precision(prec);
        CHECK(Mlp::count_params(m.dims()) == m.num_params());
        CHECK(Mlp::activation_bytes(m.dims(), 40) == m.activation_bytes());
        CHECK(Mlp::operand_bytes(m.dims(), 40, prec) == m.operand_bytes());
        GptConfig cfg;
        cfg.vocab_size = 67;
        cfg.block_size = 16;
        cfg.n_layer = 2;
        cfg.n_head = 2;
        cfg.n_embd = 32;
        Gpt g(cfg, 3);
        g.set_precision(prec);
        CHECK(Gpt::count_params(cfg) == g.num_params());
        CHECK(Gpt::operand_bytes(cfg, 3, prec) == g.operand_bytes());
        CHECK((prec == Precision::bf16) == (g.operand_bytes() > 0));
    }
}

namespace {

Options plan_options() {
    std::vector<char*> argv{const_cast<char*>("dptrain"), const_cast<char*>("--batch-size"), const_cast<char*>("8"),
                            const_cast<char*>("--prefetch"), const_cast<char*>("4")};
    return parse_options((int)argv.size(), argv.data()).opts;  // every other option at its default
}

PlanFacts gpt_facts(int ranks) {
    PlanFacts f;
    f.spec.kind = ModelKind::gpt;
    f.spec.gpt.vocab_size = 512;
    f.spec.gpt.block_size = 64;
    f.spec.gpt.n_layer = 4;
    f.spec.gpt.n_head = 4;
    f.spec.gpt.n_embd = 128;
    f.spec.batch = 8;
    f.ranks = ranks;
    f.ints_per_sample = 65;
    f.eval_rows = 8;
    f.val_ints = 65;
    f.runtime = 50 << 20;
    return f;
}

const MemoryRow& row(const MemoryPlan& p, const std::string& part) {
    for (const MemoryRow& r : p.rows)
        if (r.part == part) return r;
    FAIL("no row " << part);
    return p.rows.front();
}

} // namespace

TEST_CASE("memory plan: sharding, recomputation, the largest batch, a GPU budget", "[plan]") {
    Options o = plan_options();
    const PlanFacts f = gpt_facts(4);
    const size_t P = Gpt::count_params(f.spec.gpt);
    const MemoryPlan whole = plan_memory(o, f, 0, "");
    CHECK(row(whole, "parameters").bytes == P * 4);
    CHECK(row(whole, "optimizer state").bytes == 2 * P * 4);
    CHECK(row(whole, "activations").bytes == Gpt::activation_bytes(f.spec.gpt, 8));
    CHECK(row(whole, "runtime").bytes == (size_t)(50 << 20));
    size_t sum = 0;
    for (const MemoryRow& r : whole.rows) sum += r.bytes;
    CHECK(whole.total == sum);
    CHECK(whole.largest_batch == -1);  // no budget

    o.shard_optimizer = true;
    const MemoryPlan sharded = plan_memory(o, f, 0, "");
    // m and v of one shard: 2 floats a parameter over 4 ranks, to a line; the host path's summed
    // gradients of the shard beside them, 1 float.
    const size_t shard = shard_span(P, 0, 4).size();
    CHECK(row(sharded, "optimizer state").bytes == 2 * shard * 4);
    CHECK(row(sharded, "summed gradient shard").bytes == shard * 4);
    CHECK(row(sharded, "optimizer state").bytes < row(whole, "optimizer state").bytes / 2);
    CHECK(sharded.total < whole.total);
    // A GPU-resident step keeps the state's shard on the GPU (and reduces the sums in place).
    CHECK(sharded.gpu_total == whole.gpu_total - 2 * P * 4 + 2 * shard * 4);

    // bf16 staging only for bf16 on the wire: auto on a node of several ranks stages for both
    // paths (the window's and the flat one's), and a sharded state adds its shard's receive buffer.
    CHECK(row(sharded, "communication buffers").bytes == 0);
    o.grad_dtype = DType::bf16;
    const size_t staged = row(plan_memory(o, f, 0, ""), "communication buffers").bytes;
    const size_t copies = f.local_ranks > 1 ? 2 : 1;
    CHECK(staged == copies * (P + kControlFloats) * 2 + shard_span(P, 0, 4).size() * 2);
    o.grad_dtype = DType::f32;

    o.shard_optimizer = false;
    PlanFacts fb = f;
    fb.spec.gpt.recompute = Recompute::block;
    CHECK(row(plan_memory(o, fb, 0, ""), "activations").bytes < row(whole, "activations").bytes);

    // The largest batch: its plan fits, one more does not.
    const size_t budget = whole.total + (whole.total >> 1);
    const MemoryPlan b = plan_memory(o, f, budget, "a test");
    REQUIRE(b.largest_batch > 8);
    Options at = o;
    at.batch_size = b.largest_batch;
    CHECK(plan_memory(at, f, 0, "").total <= budget);
    at.batch_size = b.largest_batch + 1;
    CHECK(plan_memory(at, f, 0, "").total > budget);
    CHECK(b.fits());
    CHECK_FALSE(plan_memory(o, f, whole.total - 1, "a test").fits());
    CHECK(plan_memory(o, f, 1024, "a test").largest_batch == 0);

    // A GPU budget bounds what the GPU holds: the input ring and the runtime stay on the host.
    const MemoryPlan g = plan_memory(o, f, whole.total - (40 << 20), "--gpu-memory", true);
    CHECK(g.gpu_total < whole.total - (50 << 20));
    CHECK(g.fits());
    const std::string table = plan_table(g, o, f);
    CHECK(table.find("fits") != std::string::npos);
    // Each memory its own total; no line adds the GPU's bytes to the host's.
    // The host keeps its own parameters and optimizer state beside the GPU's (the checkpoint's source).
    CHECK(g.host_total == g.total - g.gpu_total + row(g, "parameters").bytes + row(g, "optimizer state").bytes);
    CHECK(table.find(strfmt("on the host (rank 0)   %10.1f MiB", g.host_total / 1048576.0)) != std::string::npos);
    CHECK(table.find(strfmt("on the GPU [GPU]       %10.1f MiB", g.gpu_total / 1048576.0)) != std::string::npos);
    CHECK(table.find("total (rank 0)") == std::string::npos);
    CHECK(plan_table(whole, o, f).find(strfmt("total (rank 0)         %10.1f MiB", whole.total / 1048576.0)) !=
          std::string::npos);
}

TEST_CASE("parse_bytes: sizes as people write them, one line for anything else", "[plan]") {
    CHECK(parse_bytes("80GiB", "--gpu-memory") == 80ull << 30);
    CHECK(parse_bytes("80 GB", "--gpu-memory") == 80ull << 30);
    CHECK(parse_bytes("512MiB", "--gpu-memory") == 512ull << 20);
    CHECK(parse_bytes("1.5TiB", "--gpu-memory") == (size_t)(1.5 * (1ull << 40)));
    CHECK(parse_bytes("4096", "--gpu-memory") == 4096);
    for (const char* bad : {"", "GiB", "-1GiB", "80 parsecs", "0", "nan"})
        CHECK_THROWS_WITH(parse_bytes(bad, "--gpu-memory"), Catch::Contains("--gpu-memory") && Catch::Contains("80GiB"));
    CHECK(resident_bytes() > 0);
    CHECK(peak_resident_bytes() >= resident_bytes());
}

// The CUDA model's sizes (backend/gpu_sizes.h; the [cuda] tests hold them to what CudaGpt
// allocates): in fp32 the CPU model's exactly; in bf16 the values bf16 keeps at 2 bytes, derived
// here buffer by buffer from the CPU's fp32 total, and bf16 operands at 2 bytes where the CPU
// keeps its rounded copies as floats.
TEST_CASE("memory plan on a GPU: the CUDA model's sizes, in bf16 half-byte activations", "[plan]") {
    GptConfig cfg;
    cfg.vocab_size = 100;  // padded to 128 in bf16
    cfg.block_size = 32;
    cfg.n_layer = 3;
    cfg.n_head = 2;
    cfg.n_embd = 16;
    const int B = 5;
    for (bool flash : {false, true})
        for (Recompute r : {Recompute::none, Recompute::attention, Recompute::block}) {
            cfg.flash_attention = flash;
            cfg.recompute = r;
            INFO("flash " << flash << ", recompute " << (int)r);
            const size_t fp32 = Gpt::activation_bytes(cfg, B);
            CHECK(gpu_gpt_activation_bytes(cfg, B, Precision::fp32) == fp32);
            const size_t BT = (size_t)B * 32, BTC = BT * 16, Lk = r == Recompute::block ? 1 : 3;
            // ln1, ln2, fch (4), GELU's (4) per kept layer, lnf and the logits: 2 bytes less each, the
            // logits' rows padded from 100 to 128 values; bf16's own atty and dfc copies; with flash,
            // qkv (3) at 2 bytes less and no fp32 atty.
            size_t bf16 = fp32 - 2 * (10 * Lk * BTC + BTC + BT * 100) + 2 * BT * 28 + 2 * (Lk * BTC + 4 * BTC);
            if (flash) bf16 = bf16 - 2 * 3 * Lk * BTC - 4 * Lk * BTC;
            CHECK(gpu_gpt_activation_bytes(cfg, B, Precision::bf16) == bf16);
        }
    const size_t P = Gpt::count_params(cfg), BT = (size_t)B * 32;
    CHECK(gpu_gpt_operand_bytes(cfg, B, Precision::fp32) == 0);
    CHECK(gpu_gpt_operand_bytes(cfg, B, Precision::bf16) == 2 * (P + BT * 128));  // weights, the logits' gradient
    CHECK(gpu_mlp_operand_bytes({13, 32, 5}, 40, Precision::bf16) == 2 * (Mlp::count_params({13, 32, 5}) + 2 * 40 * 32));

    // The plan takes them when it is a GPU's: equal rows in fp32, smaller in bf16.
    Options o = plan_options();
    PlanFacts host = gpt_facts(1), gpu = gpt_facts(1);
    gpu.gpu = true;
    CHECK(row(plan_memory(o, gpu, 0, ""), "activations").bytes == row(plan_memory(o, host, 0, ""), "activations").bytes);
    host.spec.precision = gpu.spec.precision = Precision::bf16;
    const MemoryPlan h = plan_memory(o, host, 0, ""), g = plan_memory(o, gpu, 0, "");
    CHECK(row(g, "activations").bytes == gpu_gpt_activation_bytes(gpu.spec.gpt, 8, Precision::bf16));
    CHECK(row(g, "activations").bytes < row(h, "activations").bytes);
    CHECK(row(g, "bf16 operands").bytes == gpu_gpt_operand_bytes(gpu.spec.gpt, 8, Precision::bf16));
    CHECK(row(g, "bf16 operands").bytes < row(h, "bf16 operands").bytes / 2);
    // and the GPU's cuBLAS workspace beside them.
    CHECK(row(g, "cuBLAS workspace").bytes == gpu_blas_workspace_bytes());
    for (const MemoryRow& r : h.rows) CHECK(r.part != "cuBLAS workspace");
    CHECK(g.gpu_total - gpu_blas_workspace_bytes() < h.gpu_total);
}

// A file of a made-up /sys/fs/cgroup tree, its folders made.
static void put(const std::filesystem::path& p, const std::string& text) {
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p) << text;
}

// The cgroups' limit from a tree laid out as the kernel lays them out: v2 (memory.max, "max" for
// none) and v1 (memory/…/memory.limit_in_bytes, ~2^63 for none), the tightest from the process's
// cgroup up to the root.
TEST_CASE("cgroup_memory_limit: the tightest limit on the cgroup's path, v1 and v2", "[plan]") {
    namespace fs = std::filesystem;
    const fs::path root = fs::temp_directory_path() / ("dptrain-cg-" + std::to_string(::getpid()));
    fs::remove_all(root);
    std::string where;
    // v2: a pod's cgroup below a node's slice; the slice is the tighter.
    put(root / "v2/kubepods/memory.max", "1610612736\n");
    put(root / "v2/kubepods/pod1/memory.max", "max\n");
    put(root / "self-v2", "0::/kubepods/pod1\n");
    CHECK(cgroup_memory_limit(&where, (root / "v2").string(), (root / "self-v2").string()) == 1610612736u);
    CHECK(where == (root / "v2/kubepods/memory.max").string());
    // v1: the memory controller's line; a container that sees its own cgroup as the root.
    put(root / "v1/memory/memory.limit_in_bytes", "9223372036854771712\n");
    put(root / "v1/memory/job_7/memory.limit_in_bytes", "2147483648\n");
    put(root / "self-v1", "4:memory:/job_7\n3:cpuset:/\n0::/\n");
    CHECK(cgroup_memory_limit(&where, (root / "v1").string(), (root / "self-v1").string()) == 2147483648u);
    CHECK(where == (root / "v1/memory/job_7/memory.limit_in_bytes").string());
    // No limit anywhere, and no cgroup file: 0.
    put(root / "self-none", "4:memory:/\n0::/\n");
    CHECK(cgroup_memory_limit(&where, (root / "v1").string(), (root / "self-none").string()) == 0u);
    CHECK(cgroup_memory_limit(&where, (root / "v1").string(), (root / "absent").string()) == 0u);
    fs::remove_all(root);
}

// Slurm's --mem (per node) or --mem-per-cpu, where Slurm does not enforce it with a cgroup; the
// budget takes it when it is the tightest, and says so.
TEST_CASE("slurm_memory_limit and host_budget: Slurm's allocation as a budget", "[plan]") {
    const char* names[] = {"SLURM_MEM_PER_NODE", "SLURM_MEM_PER_CPU", "SLURM_CPUS_ON_NODE"};
    std::string saved[3];
    bool had[3];
    for (int i = 0; i < 3; ++i) {
        const char* v = std::getenv(names[i]);
        had[i] = v != nullptr;
        if (v) saved[i] = v;
        ::unsetenv(names[i]);
    }
    std::string what, from;
    CHECK(slurm_memory_limit(&what) == 0u);
    ::setenv("SLURM_MEM_PER_CPU", "100", 1);
    ::setenv("SLURM_CPUS_ON_NODE", "3", 1);
    CHECK(slurm_memory_limit(&what) == 300u << 20);
    CHECK(what == "SLURM_MEM_PER_CPU=100 x SLURM_CPUS_ON_NODE=3");
    ::setenv("SLURM_MEM_PER_NODE", "64", 1);  // takes precedence, as in Slurm
    CHECK(slurm_memory_limit(&what) == 64u << 20);
    // 64 MiB is below any machine this runs on, so it is the budget, shared by the node's 2 ranks.
    CHECK(host_budget(2, &from) == 32u << 20);
    CHECK(from == "Slurm's allocation 0.1 GiB (SLURM_MEM_PER_NODE=64) / 2 ranks");
    ::setenv("SLURM_MEM_PER_NODE", "64M", 1);  // not Slurm's form: ignored
    CHECK(slurm_memory_limit(&what) == 300u << 20);
    for (int i = 0; i < 3; ++i) {
        if (had[i]) ::setenv(names[i], saved[i].c_str(), 1);
        else ::unsetenv(names[i]);
    }
}

// A pod's CPU limit: v2 cpu.max ("QUOTA PERIOD", "max PERIOD" for none) and v1's two files
// (quota -1 for none), under cpu or cpu,cpuacct, the tightest from the cgroup up.
TEST_CASE("cgroup_cpu_limit: a CPU quota in CPUs, v1 and v2", "[plan]") {
    namespace fs = std::filesystem;
    const fs::path root = fs::temp_directory_path() / ("dptrain-cpu-" + std::to_string(::getpid()));
    fs::remove_all(root);
    std::string where;
    put(root / "v2/kubepods/cpu.max", "max 100000\n");
    put(root / "v2/kubepods/pod1/cpu.max", "250000 100000\n");
    put(root / "self-v2", "0::/kubepods/pod1\n");
    CHECK(cgroup_cpu_limit(&where, (root / "v2").string(), (root / "self-v2").string()) == Approx(2.5));
    CHECK(where == (root / "v2/kubepods/pod1/cpu.max").string());
    put(root / "v1/cpu,cpuacct/cpu.cfs_quota_us", "-1\n");
    put(root / "v1/cpu,cpuacct/cpu.cfs_period_us", "100000\n");
    put(root / "v1/cpu,cpuacct/job/cpu.cfs_quota_us", "50000\n");
    put(root / "v1/cpu,cpuacct/job/cpu.cfs_period_us", "100000\n");
    put(root / "self-v1", "5:cpu,cpuacct:/job\n4:memory:/job\n0::/\n");
    CHECK(cgroup_cpu_limit(&where, (root / "v1").string(), (root / "self-v1").string()) == Approx(0.5));
    CHECK(where == (root / "v1/cpu,cpuacct/job/cpu.cfs_quota_us").string());
    put(root / "self-none", "5:cpu,cpuacct:/\n0::/\n");
    CHECK(cgroup_cpu_limit(&where, (root / "v1").string(), (root / "self-none").string()) == 0.0);
    CHECK(cgroup_cpu_limit(&where, (root / "v2").string(), (root / "absent").string()) == 0.0);
    fs::remove_all(root);
}

TEST_CASE("memory plan: a Llama's rows are its own sizes, with --recompute and bf16", "[plan][llama]") {
    Options o = plan_options();
    PlanFacts f = gpt_facts(2);
    f.spec.kind = ModelKind::llama;
    f.spec.gpt.arch = DecoderArch::llama;
    f.spec.gpt.n_kv_head = 2;
    f.spec.gpt.tie_embeddings = false;
    const size_t P = Llama::count_params(f.spec.gpt);
    CHECK(P != Gpt::count_params(f.spec.gpt));
    const MemoryPlan plain = plan_memory(o, f, 0, "");
    CHECK(row(plain, "parameters").bytes == P * 4);
    CHECK(row(plain, "activations").bytes == Llama::activation_bytes(f.spec.gpt, 8));
    CHECK(row(plain, "activations").bytes == Llama(f.spec.gpt, 8).activation_bytes());
    o.recompute = Recompute::block;
    f.spec.gpt.recompute = Recompute::block;
    f.spec.precision = Precision::bf16;
    o.precision = Precision::bf16;
    const MemoryPlan less = plan_memory(o, f, 0, "");
    CHECK(row(less, "activations").bytes == Llama::activation_bytes(f.spec.gpt, 8));
    CHECK(row(less, "activations").bytes < row(plain, "activations").bytes);
    CHECK(row(less, "bf16 operands").bytes == Llama::operand_bytes(f.spec.gpt, 8, Precision::bf16));
    // A GPU's plan: the same fp32 activations (CudaLlama keeps the CPU's list), the operands at 2
    // bytes a value (every weight, the widest activation and output gradient).
    f.gpu = true;
    const MemoryPlan gpu = plan_memory(o, f, 0, "");
    size_t act = 0, grad = 0;
    llama_operand_sizes(llama_resolved(f.spec.gpt), 8, &act, &grad);
    CHECK(row(gpu, "activations").bytes == row(less, "activations").bytes);
    CHECK(row(gpu, "bf16 operands").bytes == 2 * (P + act + grad));
    CHECK(row(gpu, "bf16 operands").bytes == gpu_llama_operand_bytes(f.spec.gpt, 8, Precision::bf16));
    CHECK(row(gpu, "bf16 operands").bytes * 2 == row(less, "bf16 operands").bytes);
    CHECK(gpu_llama_operand_bytes(f.spec.gpt, 8, Precision::fp32) == 0);
}

// --batch-size auto: the largest batch whose plan fits 90% of the budget (one more does not), a
// cap below it taken with its reason, and one line where nothing fits or no budget is known.
TEST_CASE("memory plan: --batch-size auto takes the largest batch that fits 90% of the budget", "[plan]") {
    const Options o = plan_options();
    const PlanFacts f = gpt_facts(1);
    const size_t budget = (size_t)300 << 20, usable = budget - budget / 10;
    std::string why;
    const int b = auto_batch(o, f, budget, "a test's 300 MiB", false, 0, "", &why);
    REQUIRE(b > 2);
    Options at = o;
    at.batch_size = b;
    CHECK(plan_memory(at, f, usable, "").fits());
    at.batch_size = b + 1;
    CHECK_FALSE(plan_memory(at, f, usable, "").fits());
    CHECK(why == strfmt("--batch-size auto: %d, the largest the memory plan fits in 90%% of 300.0 MiB (a test's 300 MiB)", b));
    CHECK(auto_batch(o, f, budget, "a test's 300 MiB", false, b - 1, "a cap", &why) == b - 1);
    CHECK(why.find(strfmt("--batch-size auto: %d, a cap; the memory plan fits %d", b - 1, b)) == 0);
    CHECK(auto_batch(o, f, budget, "a test's 300 MiB", false, b + 5, "a cap above", &why) == b);  // a cap above: no cap
    CHECK_THROWS_WITH(auto_batch(o, f, (size_t)1 << 20, "1 MiB", false, 0, "", &why),
                      Catch::Contains("--batch-size auto: not one sample a micro-batch fits in 90% of 1.0 MiB (1 MiB)"));
    CHECK_THROWS_WITH(auto_batch(o, f, 0, "", false, 0, "", &why), Catch::Contains("give --batch-size N"));
    // A GPU's budget counts only what the GPU holds: a larger batch than the host's plan of the same size.
    PlanFacts g = f;
    g.gpu = true;
    CHECK(auto_batch(o, g, budget, "a GPU", true, 0, "", &why) > b);
}
