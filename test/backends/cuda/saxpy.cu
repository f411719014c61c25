// saxpy for the CUDA tests, packed by `rig pack` where nvcc is installed. extern "C" keeps the
// kernel's plain name; the explicit roundings make every element equal the host's a * x + y bit
// for bit (nvcc would otherwise fuse the multiply and the add).
extern "C" __global__ void saxpy(unsigned long long n, float a, const float* x, float* y) {
  const unsigned long long i = blockIdx.x * static_cast<unsigned long long>(blockDim.x) + threadIdx.x;
  if (i < n) y[i] = __fadd_rn(__fmul_rn(a, x[i]), y[i]);
}
