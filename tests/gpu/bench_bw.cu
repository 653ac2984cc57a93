// Bandwidth of device memory, run natively (cudaMalloc memory) and under the shim (its VMM
// memory) by gpucheck.py, which prints the two side by side as ratios: a driver once made VMM
// memory slower to copy than cudaMalloc memory, and copy engines lose bandwidth on memory made of
// many handles. The shim gives an allocation of 32 MiB or more that it makes of new memory one
// handle (smaller ones 2 MiB pieces): 32 MiB, at that threshold, and two larger sizes are measured.
// Lines: "BENCH <what>_<size>MiB <GB/s>", each the median of 9 timed repetitions after 2 warm-ups
// (a repetition of a buffer under 512 MiB runs it as many times as make 512 MiB):
//   d2d:   cudaMemcpyAsync of the whole buffer to a second one (bytes copied per second)
//   read:  a kernel that reads the whole buffer (16-byte loads, every thread a strided share)
//   write: a kernel that writes the whole buffer
// and "RESULT bw_<size>MiB ok=1" when the copy and the writes left what they should (sampled).
// BENCH_BW_VMM=PIECE_MIB (run natively) maps the buffers with the driver's VMM API itself, in
// pieces of that many MiB (0: one handle per buffer): the anchors that tell a cost of VMM memory
// as such from a cost of the shim's layout.
// Usage: bench_bw [MiB...]   (default: 32 512 2048)
#include <vector>
#include <cuda.h>
#include "common.h"

#define MIB (1ull << 20)

__global__ void read_kernel(const uint4 *p, size_t n, uint32_t *out)
{
	uint32_t acc = 0;
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		uint4 v = p[i];
		acc ^= v.x ^ v.y ^ v.z ^ v.w;
	}
	atomicXor(out, acc);
}

__global__ void write_kernel(uint4 *p, size_t n, uint32_t seed)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		p[i] = make_uint4(seed, seed, seed, seed);
}

// GB/s of `run` over `bytes`, median of 9 after 2 warm-ups, timed with events. Each timing
// covers `run` repeated until about 512 MiB have moved: one 32 MiB copy takes ~20 us, which the
// events' own resolution (~0.5 us) and the gap before the first copy would make noisy by a few
// percent, more than the difference measured.
template <typename F> static double rate(size_t bytes, F run)
{
	const int reps = bytes >= 512 * MIB ? 1 : (int)(512 * MIB / bytes);
	cudaEvent_t a, b;
	std::vector<double> gbs;
	CK(cudaEventCreate(&a));
	CK(cudaEventCreate(&b));
	for (int i = 0; i < 11; i++) {
		float ms = 0;
		CK(cudaEventRecord(a));
		for (int r = 0; r < reps; r++)
			run();
		CK(cudaEventRecord(b));
		CK(cudaEventSynchronize(b));
		CK(cudaEventElapsedTime(&ms, a, b));
		if (i >= 2 && ms > 0)
			gbs.push_back((double)bytes * reps / (ms * 1e-3) / 1e9);
	}
	CK(cudaEventDestroy(a));
	CK(cudaEventDestroy(b));
	return gbs.empty() ? 0 : median(gbs);
}

// Three 16-byte words of p (first, middle, last) all equal to w?
static bool sampled(const uint4 *p, size_t n4, uint32_t w)
{
	size_t at[3] = { 0, n4 / 2, n4 - 1 };
	for (size_t i : at) {
		uint4 v = make_uint4(0, 0, 0, 0);
		CK(cudaMemcpy(&v, p + i, sizeof(v), cudaMemcpyDeviceToHost));
		if (v.x != w || v.y != w || v.z != w || v.w != w)
			return false;
	}
	return true;
}

#define CU(call)                                                                   \
	do {                                                                       \
		CUresult r_ = (call);                                              \
		if (r_ != CUDA_SUCCESS) {                                          \
			printf("ERROR %s: CUresult %d\n", #call, (int)r_);         \
			g_failures++;                                              \
		}                                                                  \
	} while (0)

// bytes of VMM memory in pieces of `piece` bytes (0, or a piece larger than the buffer: one
// handle; the last piece smaller when bytes is not a multiple), mapped read-write on device 0.
static void *vmm_alloc(size_t bytes, size_t piece)
{
	CUmemAllocationProp prop = {};
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = 0;
	CUdeviceptr va = 0;
	CUmemAccessDesc acc = {};
	acc.location = prop.location;
	acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	if (!piece || piece > bytes)
		piece = bytes;
	CU(cuMemAddressReserve(&va, bytes, 0, 0, 0));
	for (size_t off = 0; off < bytes; off += piece) {
		CUmemGenericAllocationHandle h;
		size_t sz = bytes - off < piece ? bytes - off : piece;
		CU(cuMemCreate(&h, sz, &prop, 0));
		CU(cuMemMap(va + off, sz, 0, h, 0));
		CU(cuMemRelease(h)); // the mapping keeps it
	}
	CU(cuMemSetAccess(va, bytes, &acc, 1));
	return (void *)va;
}

static void vmm_free(void *p, size_t bytes)
{
	CU(cuMemUnmap((CUdeviceptr)p, bytes));
	CU(cuMemAddressFree((CUdeviceptr)p, bytes));
}

static void measure(size_t mib, long vmm_piece_mib)
{
	size_t bytes = mib * MIB, n4 = bytes / sizeof(uint4);
	uint4 *src = NULL, *dst = NULL;
	uint32_t *out = NULL;
	int sms = 0, ok;

	CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
	if (vmm_piece_mib >= 0) {
		CK(cudaFree(0)); // the primary context, current, for the driver calls
		src = (uint4 *)vmm_alloc(bytes, (size_t)vmm_piece_mib * MIB);
		dst = (uint4 *)vmm_alloc(bytes, (size_t)vmm_piece_mib * MIB);
	} else {
		CK(cudaMalloc(&src, bytes));
		CK(cudaMalloc(&dst, bytes));
	}
	CK(cudaMalloc(&out, sizeof(*out)));
	if (!src || !dst || !out) {
		printf("ERROR bench_bw: cannot allocate 2 x %zu MiB\n", mib);
		return;
	}
	dim3 grid(sms * 8), block(256);
	write_kernel<<<grid, block>>>(src, n4, 0x5a5a5a5au);
	double d2d = rate(bytes, [&] {
		CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice));
	});
	ok = sampled(dst, n4, 0x5a5a5a5au);
	double rd = rate(bytes, [&] { read_kernel<<<grid, block>>>(src, n4, out); });
	double wr = rate(bytes, [&] { write_kernel<<<grid, block>>>(dst, n4, 0x12345678u); });
	ok = ok && sampled(dst, n4, 0x12345678u) && cudaGetLastError() == cudaSuccess;
	printf("BENCH d2d_%zuMiB %.1f GB/s\nBENCH read_%zuMiB %.1f GB/s\n", mib, d2d, mib, rd);
	printf("BENCH write_%zuMiB %.1f GB/s\n", mib, wr);
	printf("RESULT bw_%zuMiB ok=%d\n", mib, ok);
	if (vmm_piece_mib >= 0) {
		vmm_free(src, bytes);
		vmm_free(dst, bytes);
	} else {
		CK(cudaFree(src));
		CK(cudaFree(dst));
	}
	CK(cudaFree(out));
}

int main(int argc, char **argv)
{
	std::vector<size_t> sizes;
	for (int i = 1; i < argc; i++)
		sizes.push_back(strtoull(argv[i], NULL, 10));
	if (sizes.empty())
		sizes = { 32, 512, 2048 };
	const char *vmm = getenv("BENCH_BW_VMM");
	long piece = vmm && *vmm ? strtol(vmm, NULL, 10) : -1;
	for (size_t s : sizes)
		if (s)
			measure(s, piece);
	printf("RESULT bench_bw failures=%d\n", g_failures);
	return g_failures ? 1 : 0;
}
