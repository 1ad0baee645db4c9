// The doctor: each rank checks its environment (MPI, GPUs, NCCL, libfabric, HDF5, data, checkpoint
// directory); rank 0 prints them with a summary. Not for: fixing anything it finds.
#include "dptrain/app/doctor.h"

#include "dptrain/backend/device.h"
#include "dptrain/comm/communicator.h"
#include "dptrain/io/checkpoint.h"
#include "dptrain/data/shards.h"
#include "dptrain/core/check.h"
#include "dptrain/core/error.h"
#include "dptrain/core/files.h"
#include "dptrain/io/gpu_health.h"
#include "dptrain/core/clock.h"
#include "dptrain/data/tokens.h"
#include "dptrain/core/version.h"

#include <hdf5.h>
#include <rdma/fabric.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fcntl.h>
#include <set>
#include <unistd.h>
#include <vector>


namespace dptrain {

namespace {

struct Findings {
    std::vector<std::string> lines;
    int fatal = 0, warnings = 0;
    void ok(const std::string& s) { lines.push_back("  ok    " + s); }
    void warn(const std::string& s) {
        lines.push_back("  warn  " + s);
        ++warnings;
    }
    void bad(const std::string& s) {
        lines.push_back("  FATAL " + s);
        ++fatal;
    }
};

std::string launcher() {
    if (std::getenv("SLURM_STEP_ID") || std::getenv("SLURM_JOB_ID")) return "Slurm (srun)";
    if (std::getenv("OMPI_COMM_WORLD_SIZE")) return "mpirun (Open MPI)";
    if (std::getenv("PMIX_RANK")) return "a PMIx launcher";
    return "none (a single process)";
}


std::set<std::string> fabric_providers() {
    std::set<std::string> names;
    fi_info* info = nullptr;
    if (fi_getinfo(FI_VERSION(1, 9), nullptr, nullptr, 0, nullptr, &info) == 0) {
        for (fi_info* p = info; p; p = p->next)
            if (p->fabric_attr && p->fabric_attr->prov_name) names.insert(p->fabric_attr->prov_name);
        fi_freeinfo(info);
    }
    return names;
}

// MB/s, page cache included.
double read_rate(const Dataset& d, double seconds) {
    std::vector<char> buf(8 << 20);
    size_t bytes = 0;
    double t0 = now_seconds();
    for (int i = 0; i < d.num_shards() && now_seconds() - t0 < seconds; ++i) {
        int fd = ::open(d.shard_path(i).c_str(), O_RDONLY);
        if (fd < 0) continue;
        ssize_t got;
        while ((got = ::read(fd, buf.data(), buf.size())) > 0 && now_seconds() - t0 < seconds) bytes += (size_t)got;
        ::close(fd);
    }
    double dt = now_seconds() - t0;
    return dt > 0 ? bytes / dt / 1e6 : 0;
}

// Changes nothing: doctor may run beside a job training there, and the run's cleanup of a killed
// writer's temporary files would remove a live writer's. A missing directory's parent must take a file.
void check_checkpoint_dir(const std::string& dir, Findings& f) {
    namespace fs = std::filesystem;
    std::error_code ec;
    fs::path at = dir;
    while (!at.empty() && !fs::exists(at, ec)) at = at.parent_path();
    if (at.empty()) at = ".";
    std::string why;
    if (!can_write_in(at.string(), &why)) {
        f.bad(strfmt("--checkpoint-dir %s: cannot write in %s (%s); choose a writable directory", dir.c_str(),
                     at.c_str(), why.c_str()));
        return;
    }
    const double free_gb = free_bytes(at.string()) / 1e9;
    f.ok(strfmt("checkpoint directory %s writable%s, %.1f GB free", dir.c_str(),
                at == fs::path(dir) ? "" : strfmt(" (to be made under %s)", at.c_str()).c_str(), free_gb));
}

void check(const Options& o, const Topology& t, Findings& f) {
    const std::string mpi = mpi_library_version();
    f.ok(strfmt("launcher %s; MPI %s; %d ranks on %d node%s, %d here", launcher().c_str(), mpi.c_str(), t.size,
                t.num_nodes, t.num_nodes == 1 ? "" : "s", t.local_size));
    std::string why;
    int gpus = gpu_count(&why);

    if (o.device == DeviceKind::cpu) {
        f.ok(strfmt("--device cpu: the CPU backend will train (%d GPU%s visible)", std::max(gpus, 0), gpus == 1 ? "" : "s"));
    } else if (gpus > 0) {
        if (gpus < t.local_size)
            f.bad(strfmt("%d GPUs for %d ranks on this node: give each rank its own GPU%s", gpus, t.local_size,
                         o.device == DeviceKind::automatic ? " (or train on the CPU: --device cpu)" : ""));
        else f.ok(strfmt("%d GPUs visible", gpus));
    } else if (o.device == DeviceKind::cuda) {
        f.bad(strfmt("--device cuda, but no GPU (%s): run on a GPU node, or use --device auto or cpu", why.c_str()));
    } else {
        f.warn(strfmt("no GPU (%s): the CPU backend will train", why.c_str()));
    }

    GpuHealth nvml;
    std::string nvml_why;
    if (nvml.open(&nvml_why)) {
        GpuSample s;
        int index = nvml.index_for_cuda_device(t.local_rank);
        if (index >= 0 && nvml.sample(index, &s, &nvml_why))
            f.ok(strfmt("GPU %d (NVML): %s", index, format_gpu_sample(s).c_str()));
        else if (index < 0)
            f.warn(strfmt("NVML sees %d GPUs, none for local rank %d", nvml.count(), t.local_rank));
        else
            f.warn(nvml_why);
    } else if (o.gpu_health == GpuHealthMode::on) {
        f.bad(strfmt("--gpu-health on, but %s: use --gpu-health auto or off", nvml_why.c_str()));
    } else {
        f.ok(strfmt("GPU health: %s", nvml_why.c_str()));
    }
    const std::string nccl = nccl_version();
    if (!nccl.empty()) f.ok("NCCL " + nccl);
    else f.warn("built without NCCL: GPU collectives are unavailable");
    std::set<std::string> prov = fabric_providers();
    std::string list;
    for (auto& p : prov) list += (list.empty() ? "" : " ") + p;
    if (prov.count("efa")) f.ok("libfabric providers: " + list);
    else
        f.warn("libfabric providers: " + (list.empty() ? std::string("none") : list) +
               "; no efa: traffic between nodes will go over TCP. On AWS, use EFA-enabled instances and install "
               "the EFA software (aws-efa-installer), and set NCCL_NET so NCCL fails instead of falling back");
    unsigned maj = 0, min = 0, rel = 0;
    H5get_libversion(&maj, &min, &rel);
    f.ok(strfmt("HDF5 %u.%u.%u; HDF5_USE_FILE_LOCKING=%s", maj, min, rel,
                std::getenv("HDF5_USE_FILE_LOCKING") ? std::getenv("HDF5_USE_FILE_LOCKING") : "(unset)"));
    try {
        std::unique_ptr<Dataset> d;
        if (language_model(o.model)) d = std::make_unique<TokenShardSet>(TokenShardSet::open(o.data, "train", o.block_size, o.seed, true));
        else d = std::make_unique<ShardSet>(ShardSet::open(o.data, "train", std::max(1, o.batch_size)));
        f.ok(strfmt("data %s: %d shards readable, %ld samples, read at %.0f MB/s", o.data.c_str(), d->num_shards(),
                    d->num_samples(), read_rate(*d, 0.3)));
    } catch (const UserError& e) {
        f.bad(e.what());
    }
    check_checkpoint_dir(o.checkpoint_dir, f);
}


} // namespace

int run_doctor(const Options& opts, const Topology& topo) {
    Findings f;
    check(opts, topo, f);
    std::string mine = strfmt("rank %d on %s (node %d, local rank %d):\n", topo.rank, topo.host.c_str(), topo.node_index,
                              topo.local_rank);
    for (auto& l : f.lines) mine += l + "\n";
    MpiCommunicator world(topo.world);
    const std::string all = world.gather_concat(mine, 0);
    int counts[2] = {f.fatal, f.warnings};
    world.allreduce(counts, 2, ReduceOp::sum);
    if (topo.rank == 0) {
        std::printf("dptrain doctor %s | %s\n%s", DPTRAIN_VERSION, build_features().c_str(), all.c_str());
        std::printf("doctor: %d fatal problem%s, %d warning%s over %d rank%s\n", counts[0], counts[0] == 1 ? "" : "s",
                    counts[1], counts[1] == 1 ? "" : "s", topo.size, topo.size == 1 ? "" : "s");
        std::fflush(stdout);
    }
    return counts[0];
}

} // namespace dptrain
