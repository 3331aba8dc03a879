/* bench_collective_cuda.c: the CUDA runtime opened at run time for `memra bench-collective`
 * (see bench_collective_cuda.h). */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "bench_collective_cuda.h"

bool bc_cuda_open(bc_cuda *cu, char *why, size_t why_size) {
    memset(cu, 0, sizeof *cu);
    /* The runtime memra's plugins link (named by the build when it had CUDA) comes first, so the
     * command and the collective share one runtime and its streams. */
    const char *names[] = {
#ifdef MEMRA_CUDART_SONAME
        MEMRA_CUDART_SONAME,
#endif
        "libcudart.so", "libcudart.so.13", "libcudart.so.12"};
    size_t n_names = sizeof names / sizeof names[0];
    char tried[512] = "";
    size_t used = 0;
    for (size_t i = 0; i < n_names && !cu->lib; i++) {
        dlerror();
        cu->lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (cu->lib) {
            snprintf(cu->path, sizeof cu->path, "%s", names[i]);
        } else if (used < sizeof tried) {
            const char *e = dlerror();
            int k = snprintf(tried + used, sizeof tried - used, "%s%s", used ? "; " : "", e ? e : names[i]);
            if (k > 0)
                used += (size_t)k;
        }
    }
    if (!cu->lib) {
        snprintf(why, why_size, "no CUDA runtime: %s", tried);
        return false;
    }
    struct {
        void **slot;
        const char *name;
    } syms[] = {
        {(void **)&cu->GetDeviceCount, "cudaGetDeviceCount"},
        {(void **)&cu->SetDevice, "cudaSetDevice"},
        {(void **)&cu->GetErrorString, "cudaGetErrorString"},
        {(void **)&cu->RuntimeGetVersion, "cudaRuntimeGetVersion"},
        {(void **)&cu->Malloc, "cudaMalloc"},
        {(void **)&cu->Free, "cudaFree"},
        {(void **)&cu->Memcpy, "cudaMemcpy"},
        {(void **)&cu->Memset, "cudaMemset"},
        {(void **)&cu->StreamCreateWithFlags, "cudaStreamCreateWithFlags"},
        {(void **)&cu->StreamDestroy, "cudaStreamDestroy"},
        {(void **)&cu->StreamQuery, "cudaStreamQuery"},
        {(void **)&cu->StreamWaitEvent, "cudaStreamWaitEvent"},
        {(void **)&cu->StreamBeginCapture, "cudaStreamBeginCapture"},
        {(void **)&cu->StreamEndCapture, "cudaStreamEndCapture"},
        {(void **)&cu->EventCreateWithFlags, "cudaEventCreateWithFlags"},
        {(void **)&cu->EventDestroy, "cudaEventDestroy"},
        {(void **)&cu->EventRecord, "cudaEventRecord"},
        {(void **)&cu->EventElapsedTime, "cudaEventElapsedTime"},
        {(void **)&cu->GraphInstantiateWithFlags, "cudaGraphInstantiateWithFlags"},
        {(void **)&cu->GraphLaunch, "cudaGraphLaunch"},
        {(void **)&cu->GraphExecDestroy, "cudaGraphExecDestroy"},
        {(void **)&cu->GraphDestroy, "cudaGraphDestroy"},
    };
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
        dlerror();
        *syms[i].slot = dlsym(cu->lib, syms[i].name);
        if (!*syms[i].slot) {
            const char *e = dlerror();
            snprintf(why, why_size, "the CUDA runtime %s has no %s: %s", cu->path, syms[i].name, e ? e : "not found");
            dlclose(cu->lib);
            memset(cu, 0, sizeof *cu);
            return false;
        }
    }
    return true;
}

void bc_cuda_close(bc_cuda *cu) {
    /* The runtime stays loaded: the collective plugin may hold it too, and unloading a CUDA
     * runtime that has a context is not promised to be safe. */
    memset(cu, 0, sizeof *cu);
}

const char *bc_cuda_text(const bc_cuda *cu, bc_cuda_err e) {
    const char *s = cu && cu->GetErrorString ? cu->GetErrorString(e) : NULL;
    return s ? s : "unknown error";
}

bool bc_cuda_built(void) {
#ifdef MEMRA_CUDART_SONAME
    return true;
#else
    return false;
#endif
}
