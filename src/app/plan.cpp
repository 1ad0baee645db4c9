// dptrain plan: its own two options, then the training options, the data's shape and the table.
#include "dptrain/app/plan.h"

#include "dptrain/comm/communicator.h"
#include "dptrain/config/option_checks.h"
#include "dptrain/config/options.h"
#include "dptrain/core/error.h"
#include "dptrain/core/memory.h"
#include "dptrain/train/memory_plan.h"
#include "dptrain/train/task.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace dptrain {

namespace {

// Removes `--name VALUE` or `--name=VALUE` from args; *given tells whether it was there. A name
// with no value after it, or an empty value, is refused (it was taken for another option's prefix,
// or ignored).
std::string take_option(std::vector<std::string>& args, const std::string& name, bool* given) {
    std::string value;
    *given = false;
    for (size_t i = 0; i < args.size();) {
        if (args[i] == name) {
            if (i + 1 >= args.size()) throw UserError(name + " needs a value");
            value = args[i + 1];
            args.erase(args.begin() + (long)i, args.begin() + (long)i + 2);
        } else if (args[i].rfind(name + "=", 0) == 0) {
            value = args[i].substr(name.size() + 1);
            args.erase(args.begin() + (long)i);
        } else {
            ++i;
            continue;
        }
        *given = true;
        if (value.empty()) throw UserError(name + " is empty; give a value");
    }
    return value;
}

struct PlanRequest {
    Options o;
    int ranks = 0;
    size_t gpu_memory = 0;
    std::string gpu_text;
};

PlanRequest parse_plan(std::vector<std::string> args, int launched) {
    PlanRequest r;
    bool has_ranks = false, has_gpu = false;
    const std::string ranks = take_option(args, "--ranks", &has_ranks), gpu = take_option(args, "--gpu-memory", &has_gpu);
    if (has_ranks) {
        char* end = nullptr;
        const long n = std::strtol(ranks.c_str(), &end, 10);
        if (end == ranks.c_str() || *end != '\0' || n < 1 || n > (1 << 20))
            throw UserError(strfmt("--ranks %s: give the number of ranks to plan for, 1 or more", ranks.c_str()));
        r.ranks = (int)n;
    } else {
        r.ranks = launched;
    }
    if (has_gpu) {
        r.gpu_memory = parse_bytes(gpu, "--gpu-memory");
        r.gpu_text = "--gpu-memory " + gpu;
    }
    std::vector<char*> argv{const_cast<char*>("dptrain")};
    for (std::string& a : args) argv.push_back(a.data());
    ParseResult parsed = parse_options((int)argv.size(), argv.data());
    if (parsed.version) throw UserError("dptrain plan takes the training options and --ranks N, --gpu-memory SIZE");
    r.o = parsed.opts;
    resolve_grad_accum(r.o, r.ranks);  // the micro-batches a step, as the run on those ranks takes them
    // As a run on those ranks would refuse it (Topology::create).
    if (r.o.ranks_per_node > 0 && r.ranks % r.o.ranks_per_node != 0)
        throw UserError(strfmt("--ranks-per-node %d does not divide --ranks %d; choose a count of ranks per node that "
                               "divides it",
                               r.o.ranks_per_node, r.ranks));
    return r;
}

// The ranks of one node: --ranks-per-node, else all of them.
int node_ranks(const PlanRequest& req) {
    return req.o.ranks_per_node > 0 ? std::min(req.o.ranks_per_node, req.ranks) : req.ranks;
}

// A GPU's plan: the CUDA model's sizes against --gpu-memory; else this machine's share.
size_t plan_budget(const PlanRequest& req, std::string* from) {
    *from = req.gpu_text;
    return req.gpu_memory > 0 ? req.gpu_memory : host_budget(node_ranks(req), from);
}

// --batch-size auto: the run's choice (auto_batch) against this plan's budget; then the
// micro-batches a step as for a given --batch-size.
void choose_plan_batch(PlanRequest& req, const Topology& topo, size_t runtime, std::string* why) {
    Options probe = req.o;
    probe.batch_size = 1;
    const std::unique_ptr<Task> task = Task::open(probe, topo);
    PlanFacts f = plan_facts(*task, probe, req.ranks, node_ranks(req), runtime);
    f.gpu = req.gpu_memory > 0;
    std::string from;
    const size_t budget = plan_budget(req, &from);
    std::string reason;
    const int cap = auto_batch_cap(*task, f.gpu, req.ranks, &reason);
    req.o.batch_size = auto_batch(probe, f, budget, from, f.gpu, cap, reason, why);
    resolve_grad_accum(req.o, req.ranks);
}

} // namespace

int run_plan(std::vector<std::string> args, const Topology& topo) {
    const size_t runtime = measure_runtime();  // what a rank holds before a run allocates
    for (const std::string& a : args)
        if (a == "--help" || a == "-h") {
            if (topo.rank == 0)
                std::printf("usage: dptrain plan [--ranks N] [--gpu-memory SIZE] [--config FILE] [--option value ...]\n\n"
                            "The memory one rank of the run these training options describe would use, part by part,\n"
                            "whether it fits, and the largest --batch-size that does. Opens --data for the model's shape.\n"
                            "  --ranks N           ranks to plan for (default: the ranks launched)\n"
                            "  --gpu-memory SIZE   a GPU's memory per rank (80GiB, 40GiB, ...): the budget of the parts a\n"
                            "                      GPU-resident step keeps there, sized as the GPU model allocates them;\n"
                            "                      default: this machine's available memory over the ranks of one node\n"
                            "                      (--ranks-per-node, else all)\n"
                            "Exit 0 when it fits, 1 when it does not, 2 for a bad option or file.\n"
                            "The training options: dptrain --help.\n");
            return 0;
        }
    PlanRequest req;
    std::unique_ptr<Task> task;
    std::string auto_why;
    if (!all_ok(topo.world, [&] {
            req = parse_plan(args, topo.size);
            if (req.o.batch_size == kBatchAuto) choose_plan_batch(req, topo, runtime, &auto_why);
            task = Task::open(req.o, topo);
        }))
        return 2;  // a bad option or file (kExitUser)
    PlanFacts f = plan_facts(*task, req.o, req.ranks, node_ranks(req), runtime);
    f.gpu = req.gpu_memory > 0;  // a GPU's plan: the CUDA model's sizes
    std::string from;
    const size_t budget = plan_budget(req, &from);
    const MemoryPlan p = plan_memory(req.o, f, budget, from, req.gpu_memory > 0);
    if (topo.rank == 0) {
        if (!auto_why.empty()) std::printf("%s\n", auto_why.c_str());
        std::printf("data: %s\nmodel: %s, %zu parameters\n%s", task->describe().c_str(), name_of(req.o.model),
                    planned_params(f.spec), plan_table(p, req.o, f).c_str());
        if (req.o.global_batch > 0)
            std::printf("--global-batch %ld on %d ranks: --batch-size %d x --grad-accum %d; rank counts that keep it "
                        "(up to 4096): %s\n",
                        req.o.global_batch, req.ranks, req.o.batch_size, req.o.grad_accum,
                        global_batch_rank_counts_text(req.o.global_batch).c_str());
        std::fflush(stdout);
    }
    return p.fits() ? 0 : 1;
}

} // namespace dptrain
