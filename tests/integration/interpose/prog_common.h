/* Small helpers for the unmodified test programs that run under the shim: fill a buffer with a
 * pattern only its seed reproduces, check it, and fail loudly. Nothing here knows of vmmshim. */
#ifndef PROG_COMMON_H
#define PROG_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FAIL(...)                                                     \
	do {                                                          \
		fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);       \
		fprintf(stderr, __VA_ARGS__);                         \
		fputc('\n', stderr);                                  \
		exit(1);                                              \
	} while (0)

#define CHECK_CU(call)                                                        \
	do {                                                                  \
		int rc_ = (int)(call);                                        \
		if (rc_ != 0)                                                 \
			FAIL("%s returned %d", #call, rc_);                   \
	} while (0)

static inline void pattern_fill(void *buf, size_t n, uint32_t seed)
{
	unsigned char *p = buf;
	uint32_t x = seed * 2654435761u + 1;

	for (size_t i = 0; i < n; i++) {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		p[i] = (unsigned char)x;
	}
}

/* 0 when buf holds the pattern of seed. */
static inline int pattern_check(const void *buf, size_t n, uint32_t seed)
{
	unsigned char *want = malloc(n ? n : 1);
	const unsigned char *p = buf;
	int bad = 0;

	pattern_fill(want, n, seed);
	for (size_t i = 0; i < n && !bad; i++)
		bad = p[i] != want[i];
	free(want);
	return bad;
}

#endif
