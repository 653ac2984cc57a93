/* Binary search over an array of records kept sorted by a device address, for the tables that
 * look addresses up (core/backend/acl.c's mappings, core/offload/app_registry.c's). */
#ifndef VMM_SORTED_SEARCH_H
#define VMM_SORTED_SEARCH_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* The index of the first of n records (at base, `stride` bytes apart) whose uint64_t key at byte
 * `key_offset` is >= key; n when there is none. */
static inline size_t vmm_sorted_lower_bound(const void *base, size_t n, size_t stride,
					    size_t key_offset, uint64_t key)
{
	size_t lo = 0, hi = n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		uint64_t k;

		memcpy(&k, (const char *)base + mid * stride + key_offset, sizeof(k));
		if (k < key)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* The same for an array `arr` of n structs sorted by their member `field`. */
#define VMM_SORTED_LOWER_BOUND(arr, n, field, key)                                             \
	vmm_sorted_lower_bound((arr), (n), sizeof(*(arr)), offsetof(__typeof__(*(arr)), field), \
			       (key))

#endif
