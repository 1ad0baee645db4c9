// libFuzzer target: the shard reader. The input drives a generator of HDF5 shards that are valid
// as HDF5 but arbitrary as dptrain shards: dtypes, ranks and shapes of /features and /labels,
// the num_classes attribute (missing, scalar, array, string, float), label values, contiguous or
// chunked/compressed layout, and sometimes a truncated file. Opening must end in a ShardSet or a
// UserError, and so must reading every row of an opened set.
// Raw bytes are not fed to HDF5 here: HDF5 1.10's own parser can crash on corrupt files, which
// dptrain cannot prevent for files users write with other tools (its own checkpoints carry a
// checksum that is verified before HDF5 parses them).
#include "dptrain/data/shards.h"
#include "dptrain/core/error.h"
#include "../scratch_dir.h"

#include <fuzzer/FuzzedDataProvider.h>
#include <unistd.h>

#include <cstdint>
#include <string>
#include <vector>

using namespace dptrain;

static std::string dir() {
    static std::string d = dptrain_test::scratch_dir("fuzz-shard");
    return d;
}

static void write_dataset(FuzzedDataProvider& in, hid_t file, const char* name, bool chunked) {
    const hid_t types[] = {H5T_NATIVE_FLOAT, H5T_NATIVE_DOUBLE, H5T_NATIVE_INT32, H5T_NATIVE_UINT32, H5T_NATIVE_INT64,
                           H5T_NATIVE_UINT8};
    hid_t type = types[in.ConsumeIntegralInRange<int>(0, 5)];
    int rank = in.ConsumeIntegralInRange<int>(0, 3);
    std::vector<hsize_t> dims(rank);
    size_t n = 1;
    for (auto& d : dims) n *= (d = in.ConsumeIntegralInRange<hsize_t>(0, 24));
    std::vector<unsigned char> bytes(n * H5Tget_size(type));
    for (auto& b : bytes) b = in.ConsumeIntegral<unsigned char>();
    h5::Hid space(rank ? H5Screate_simple(rank, dims.data(), nullptr) : H5Screate(H5S_SCALAR), H5Sclose);
    h5::Hid dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
    bool can_chunk = rank > 0 && n > 0;
    if (chunked && can_chunk) {
        std::vector<hsize_t> chunk(dims);
        for (auto& c : chunk) c = std::max<hsize_t>(1, c / 2);
        H5Pset_chunk(dcpl.get(), rank, chunk.data());
        if (in.ConsumeBool()) H5Pset_deflate(dcpl.get(), 1);
    }
    h5::Hid d(H5Dcreate2(file, name, type, space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT), H5Dclose);
    if (d && n > 0) H5Dwrite(d.get(), type, H5S_ALL, H5S_ALL, H5P_DEFAULT, bytes.data());
}

static void write_classes(FuzzedDataProvider& in, hid_t file) {
    int kind = in.ConsumeIntegralInRange<int>(0, 4);
    if (kind == 0) return;  // missing
    if (kind == 1) {
        h5::write_attr_i64(file, "num_classes", in.ConsumeIntegralInRange<int64_t>(-3, 300));
        return;
    }
    if (kind == 2) {
        h5::write_attr_str(file, "num_classes", in.ConsumeRandomLengthString(16));
        return;
    }
    hsize_t len = kind == 3 ? in.ConsumeIntegralInRange<hsize_t>(0, 4) : 1;
    hid_t type = kind == 3 ? H5T_NATIVE_INT64 : H5T_NATIVE_DOUBLE;
    int64_t v[4] = {in.ConsumeIntegral<int64_t>(), 3, 4, 5};
    double f = in.ConsumeFloatingPoint<double>();
    h5::Hid space(kind == 3 ? H5Screate_simple(1, &len, nullptr) : H5Screate(H5S_SCALAR), H5Sclose);
    h5::Hid a(H5Acreate2(file, "num_classes", type, space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
    if (a) H5Awrite(a.get(), type, kind == 3 ? (const void*)v : (const void*)&f);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    FuzzedDataProvider in(data, size);
    std::string path = dir() + "/train-00000-of-00001.h5";
    bool chunked = in.ConsumeBool();
    {
        std::lock_guard<std::mutex> g(h5::lock());
        h5::Hid f = h5::create_file(path);
        write_dataset(in, f.get(), "/features", chunked);
        write_dataset(in, f.get(), "/labels", chunked);
        write_classes(in, f.get());
    }
    if (in.ConsumeIntegralInRange<int>(0, 3) == 0) {
        off_t cut = in.ConsumeIntegralInRange<off_t>(1, 4096);
        FILE* fp = std::fopen(path.c_str(), "rb");
        if (fp) {
            std::fseek(fp, 0, SEEK_END);
            long sz = std::ftell(fp);
            std::fclose(fp);
            if (truncate(path.c_str(), std::max<long>(0, sz - cut)) != 0) return 0;
        }
    }
    try {
        ShardSet s = ShardSet::open(dir(), "train", 8);
        std::vector<float> x(8 * (size_t)s.dim());
        int y[8];
        long idx[8];
        for (long first = 0; first < s.num_samples(); first += 8) {
            int n = (int)std::min<long>(8, s.num_samples() - first);
            for (int i = 0; i < n; ++i) idx[i] = s.num_samples() - 1 - (first + i);  // every row, backwards
            s.read_rows(idx, n, x.data(), y);
        }
    } catch (const UserError&) {
    }
    return 0;
}
