/* acl_target: an ordinary Ascend program (libascendcl.so, here simdev's) for the control tests.
 * It fills buffers from aclrtMalloc with random contents, says "ready PID", then answers "check"
 * (copy back and compare: "ok N" or "corrupt") and "quit" on stdin, one line each. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/acl_api.h"

#define NBUF 6

static void *bufs[NBUF];
static size_t sizes[NBUF];
static uint64_t sums[NBUF];

static uint64_t fnv1a(const unsigned char *p, size_t n)
{
	uint64_t h = 1469598103934665603ull;

	for (size_t i = 0; i < n; i++)
		h = (h ^ p[i]) * 1099511628211ull;
	return h;
}

static int check(void)
{
	for (int i = 0; i < NBUF; i++) {
		unsigned char *h = malloc(sizes[i]);
		int bad = !h || aclrtMemcpy(h, sizes[i], bufs[i], sizes[i],
					    ACL_MEMCPY_DEVICE_TO_HOST) != ACL_SUCCESS ||
			  fnv1a(h, sizes[i]) != sums[i];

		free(h);
		if (bad)
			return i;
	}
	return -1;
}

int main(void)
{
	unsigned seed = 99;
	char line[64];

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (aclInit(NULL) != ACL_SUCCESS || aclrtSetDevice(0) != ACL_SUCCESS) {
		printf("error init\n");
		return 1;
	}
	for (int i = 0; i < NBUF; i++) {
		unsigned char *h;

		sizes[i] = (size_t)(i + 1) * 700000;
		h = malloc(sizes[i]);
		if (!h ||
		    aclrtMalloc(&bufs[i], sizes[i], ACL_MEM_MALLOC_HUGE_FIRST) != ACL_SUCCESS) {
			printf("error malloc\n");
			return 1;
		}
		for (size_t k = 0; k < sizes[i]; k++)
			h[k] = (unsigned char)(rand_r(&seed) >> 5);
		sums[i] = fnv1a(h, sizes[i]);
		if (aclrtMemcpy(bufs[i], sizes[i], h, sizes[i], ACL_MEMCPY_HOST_TO_DEVICE) !=
		    ACL_SUCCESS) {
			printf("error copy\n");
			return 1;
		}
		free(h);
	}
	printf("ready %ld\n", (long)getpid());
	while (fgets(line, sizeof(line), stdin)) {
		if (!strncmp(line, "check", 5)) {
			int bad = check();

			if (bad < 0)
				printf("ok %d\n", NBUF);
			else
				printf("corrupt %d\n", bad);
		} else if (!strncmp(line, "quit", 4)) {
			break;
		}
	}
	for (int i = 0; i < NBUF; i++)
		aclrtFree(bufs[i]);
	aclrtResetDevice(0);
	aclFinalize();
	return 0;
}
