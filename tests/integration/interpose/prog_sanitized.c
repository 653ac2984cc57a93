/* A driver-API program built with -fsanitize=address or -fsanitize=thread (meson builds both when
 * the compiler has the runtimes): allocations of several sizes from two threads, filled, copied
 * back and checked, then freed. Under the shim, the sanitizer's runtime initializes by calling
 * dlsym, which is ours. Prints "ok" and exits 0 when everything held. */
#include <cuda.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *work(void *arg)
{
	CUcontext ctx = arg;
	static const size_t sizes[] = { 256, 70000, 3 << 20 };

	if (cuCtxSetCurrent(ctx))
		return "cuCtxSetCurrent";
	for (int round = 0; round < 5; round++)
		for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
			size_t n = sizes[i];
			unsigned char *h = malloc(n), *back = malloc(n);
			CUdeviceptr d;
			const char *why = NULL;

			if (!h || !back) {
				free(h);
				free(back);
				return "host memory";
			}
			memset(h, round + (int)i, n);
			if (cuMemAlloc_v2(&d, n))
				why = "cuMemAlloc";
			else if (cuMemcpyHtoD_v2(d, h, n) || cuMemcpyDtoH_v2(back, d, n))
				why = "copy";
			else if (memcmp(h, back, n))
				why = "contents";
			if (!why || strcmp(why, "cuMemAlloc"))
				cuMemFree_v2(d);
			free(h);
			free(back);
			if (why)
				return (void *)why;
		}
	return NULL;
}

int main(void)
{
	CUcontext ctx;
	pthread_t t;
	void *a, *b;

	if (cuInit(0) || cuDevicePrimaryCtxRetain(&ctx, 0)) {
		puts("no device");
		return 1;
	}
	if (pthread_create(&t, NULL, work, ctx)) {
		puts("no thread");
		return 1;
	}
	a = work(ctx);
	pthread_join(t, &b);
	if (a || b) {
		printf("failed: %s\n", a ? (char *)a : (char *)b);
		return 1;
	}
	puts("ok");
	return 0;
}
