// A tiny CUDA library used to show that `kiln verify` names a binary that cannot run on the GPU.
// scripts/gpu/build_fixture.sh compiles it for one architecture only (sm_80, no PTX); on an
// H100 (9.0) that binary has no kernel image, and checks.py must say so before anything launches.
#include <cuda_runtime.h>

__global__ void kiln_scale(float* x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= a;
}

// Scales `host[0..n)` by `a` on the GPU; returns the first CUDA error (0 = success).
extern "C" int kiln_scale_launch(float* host, float a, int n) {
    float* d = nullptr;
    size_t bytes = static_cast<size_t>(n) * sizeof(float);
    cudaError_t e = cudaMalloc(&d, bytes);
    if (e != cudaSuccess) return static_cast<int>(e);
    e = cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice);
    if (e == cudaSuccess) {
        kiln_scale<<<(n + 255) / 256, 256>>>(d, a, n);
        e = cudaGetLastError();
    }
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    if (e == cudaSuccess) e = cudaMemcpy(host, d, bytes, cudaMemcpyDeviceToHost);
    cudaFree(d);
    return static_cast<int>(e);
}

extern "C" const char* kiln_error_name(int e) { return cudaGetErrorName(static_cast<cudaError_t>(e)); }
