/* Contents for the test targets' buffers, and their checksum, eight bytes at a time: the
 * targets run under ASan and ThreadSanitizer, which check every access, and filling 200 MB a
 * byte at a time (rand_r) took ~18 s of a TSan test on CI. */
#ifndef VMMSHIM_TEST_RANDOM_BYTES_H
#define VMMSHIM_TEST_RANDOM_BYTES_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Random bytes from *seed (xorshift64*, seeded from rand_r; the tail from rand_r). */
static inline void fill_random(unsigned char *p, size_t n, unsigned *seed)
{
	uint64_t x = ((uint64_t)rand_r(seed) << 32 | (uint64_t)rand_r(seed)) | 1;
	size_t i = 0;

	for (; i + 8 <= n; i += 8) {
		uint64_t v;

		x ^= x >> 12;
		x ^= x << 25;
		x ^= x >> 27;
		v = x * 2685821657736338717ull;
		memcpy(p + i, &v, 8);
	}
	for (; i < n; i++)
		p[i] = (unsigned char)(rand_r(seed) >> 7);
}

/* FNV-1a over 8-byte words, then the tail's bytes: any one word changed changes the sum (each
 * step is a bijection of the sum so far). */
static inline uint64_t sum_bytes(const unsigned char *p, size_t n)
{
	uint64_t h = 1469598103934665603ull;
	size_t i = 0;

	for (; i + 8 <= n; i += 8) {
		uint64_t w;

		memcpy(&w, p + i, 8);
		h = (h ^ w) * 1099511628211ull;
	}
	for (; i < n; i++)
		h = (h ^ p[i]) * 1099511628211ull;
	return h;
}

#endif
