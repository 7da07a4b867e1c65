// Stand-in for an nccl-tests perf binary: a real CUDA + NCCL (+ MPI) program that proves the
// build found and linked the toolchain, not a benchmark.
#include <cstdio>
#include <cstring>
#include <libgen.h>

#include <cuda_runtime.h>
#include <nccl.h>
#ifdef MPI_SUPPORT
#include <mpi.h>
#endif

#include "release.h"

// Device code, so that nvcc really generates code for NVCC_GENCODE.
__global__ void fill(float* data, float value, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] = value;
}

int main(int argc, char** argv) {
  (void)argc;
  printf("standin %s release %s\n", basename(argv[0]), STANDIN_RELEASE);

  int code = 0;
  ncclResult_t res = ncclGetVersion(&code);
  if (res != ncclSuccess) {
    printf("ncclGetVersion failed: %s\n", ncclGetErrorString(res));
    return 3;
  }
  // NCCL >= 2.9 encodes MAJOR*10000 + MINOR*100 + PATCH.
  printf("nccl library %d.%d.%d code %d\n", code / 10000, code % 10000 / 100, code % 100, code);

#ifdef MPI_SUPPORT
  char mpi[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(mpi, &len);  // allowed before MPI_Init
  printf("mpi %.*s\n", (int)strcspn(mpi, "\n"), mpi);
#else
  printf("mpi none\n");
#endif

  int devices = 0;
  cudaError_t err = cudaGetDeviceCount(&devices);
  if (err == cudaSuccess) {
    printf("cuda devices %d\n", devices);
    if (devices > 0) {
      float* buf = nullptr;
      if (cudaMalloc(&buf, 256 * sizeof(float)) == cudaSuccess) {
        fill<<<1, 256>>>(buf, 1.0f, 256);
        printf("cuda kernel %s\n", cudaGetErrorName(cudaDeviceSynchronize()));
        cudaFree(buf);
      }
    }
  } else {
    printf("cuda devices none (%s)\n", cudaGetErrorName(err));
  }
  printf("gencode %s\n", STANDIN_GENCODE);
  return 0;
}
