// Opens cuBLAS and cuBLASLt (the major version built against) on first use, found as the loader
// finds any library (LD_LIBRARY_PATH, run path, system), and resolves the backend's functions.
// Why not linked: cublas_library.h. Not for: choosing among CUDA versions at run time.
#define DPTRAIN_CUBLAS_LOADER
#include "cublas_library.h"

#include "dptrain/core/error.h"

#include <dlfcn.h>

#include <string>

namespace dptrain::cuda {
namespace {

#define DPTRAIN_STRING(x) #x
#define DPTRAIN_VALUE_STRING(x) DPTRAIN_STRING(x)
// libcublasLt first: libcublas needs it, and a missing Lt is then named as the missing one.
constexpr const char* kLtName = "libcublasLt.so." DPTRAIN_VALUE_STRING(CUBLAS_VER_MAJOR);
constexpr const char* kBlasName = "libcublas.so." DPTRAIN_VALUE_STRING(CUBLAS_VER_MAJOR);

void* open_library(const char* name) {
    // Kept open for the life of the process: contexts may be made and freed many times.
    void* lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char* why = dlerror();
        fatal(strfmt("cuBLAS is needed for --device cuda but %s could not be loaded (%s); dptrain was built "
                     "with CUDA %d's cuBLAS: put that CUDA's lib64 on LD_LIBRARY_PATH, or train with --device cpu",
                     name, why ? why : "no reason given", CUBLAS_VER_MAJOR));
    }
    return lib;
}

template <typename F>
void resolve(void* lib, const char* lib_name, const char* name, F* out) {
    void* p = dlsym(lib, name);
    if (!p)
        fatal(strfmt("%s has no function %s: it is older than the cuBLAS %d.%d dptrain was built with; install "
                     "that CUDA's cuBLAS or a newer one",
                     lib_name, name, CUBLAS_VER_MAJOR, CUBLAS_VER_MINOR));
    *out = reinterpret_cast<F>(p);
}

CublasApi load() {
    CublasApi api;
    void* lt = open_library(kLtName);
    void* blas = open_library(kBlasName);
#define DPTRAIN_RESOLVE_BLAS(f) resolve(blas, kBlasName, #f, &api.f);
#define DPTRAIN_RESOLVE_LT(f) resolve(lt, kLtName, #f, &api.f);
    DPTRAIN_CUBLAS_FUNCTIONS(DPTRAIN_RESOLVE_BLAS)
    DPTRAIN_CUBLAS_OVERLOADED(DPTRAIN_RESOLVE_BLAS)
    DPTRAIN_CUBLASLT_FUNCTIONS(DPTRAIN_RESOLVE_LT)
#undef DPTRAIN_RESOLVE_BLAS
#undef DPTRAIN_RESOLVE_LT
    return api;
}

} // namespace

const CublasApi& cublas_api() {
    static const CublasApi api = load();
    return api;
}

} // namespace dptrain::cuda
