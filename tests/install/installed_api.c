/* A program built the way a user builds one against an installed vmmshim:
 *     cc installed_api.c $(pkg-config --cflags --libs vmmshim) -lcudart
 * It includes <vmmshim.h>, links libvmmshim.so (so the dynamic loader loads the shim with it, no
 * LD_PRELOAD) and checks through the in-process API that the shim serves its allocations: a tag,
 * a sleep and wake with its data checked, a discarded tag, and an error with its message.
 * Exit status 0 when every check passes; one line per check. */
#include <cuda_runtime_api.h>
#include <vmmshim.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MIB (1u << 20)

static int failures;

static void check(int ok, const char *what)
{
	printf("%s: %s\n", ok ? "ok" : "FAIL", what);
	failures += !ok;
}

static unsigned char pattern(size_t i)
{
	return (unsigned char)(i * 131u + 7u);
}

int main(void)
{
	size_t n = 8 * MIB;
	unsigned char *host = malloc(n);
	void *kept = NULL, *scratch = NULL;
	vmmshim_stats_t st;
	int ok = 1;

	if (!host)
		return 2;
	for (size_t i = 0; i < n; i++)
		host[i] = pattern(i);

	check(vmmshim_set_tag("weights") == VMMSHIM_OK, "set tag weights");
	check(!strcmp(vmmshim_get_tag(), "weights"), "the thread's tag reads back");
	check(cudaMalloc(&kept, n) == cudaSuccess, "cudaMalloc under weights");
	vmmshim_set_tag("scratch");
	check(cudaMalloc(&scratch, n) == cudaSuccess, "cudaMalloc under scratch");
	vmmshim_set_tag(NULL);
	check(cudaMemcpy(kept, host, n, cudaMemcpyHostToDevice) == cudaSuccess, "fill weights");

	check(vmmshim_stats("weights", -1, &st) == VMMSHIM_OK && st.live_bytes == n &&
	      st.live_count == 1, "the shim serves the allocation (stats of weights)");

	check(vmmshim_sleep("weights", 0) == VMMSHIM_OK, "sleep weights, contents kept");
	check(vmmshim_stats("weights", -1, &st) == VMMSHIM_OK && st.asleep_bytes >= n &&
	      st.host_backup_bytes >= n, "asleep: released, with a host backup");
	check(vmmshim_sleep("weights", 0) == VMMSHIM_E_ALREADY, "a second sleep: already");
	check(vmmshim_sleep("scratch", 1) == VMMSHIM_OK, "sleep scratch, contents discarded");
	check(vmmshim_wake(NULL) == VMMSHIM_OK, "wake everything");
	check(vmmshim_stats(NULL, -1, &st) == VMMSHIM_OK && st.asleep_bytes == 0, "all awake");

	memset(host, 0, n);
	check(cudaMemcpy(host, kept, n, cudaMemcpyDeviceToHost) == cudaSuccess, "read weights");
	for (size_t i = 0; i < n && ok; i++)
		ok = host[i] == pattern(i);
	check(ok, "weights came back byte for byte at the same address");
	check(cudaMemset(scratch, 0x5a, n) == cudaSuccess, "scratch is usable after its wake");

	check(vmmshim_set_tag("bad\ttag") == VMMSHIM_E_INVALID, "a bad tag is refused");
	check(strstr(vmmshim_last_error(), "tag") != NULL, "with a message naming the tag");
	printf("message: %s\n", vmmshim_last_error());

	check(cudaFree(kept) == cudaSuccess && cudaFree(scratch) == cudaSuccess, "cudaFree");
	free(host);
	printf("%s\n", failures ? "FAILED" : "all checks passed");
	return failures ? 1 : 0;
}
