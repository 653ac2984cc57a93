/* Virtual address space of a device heap (heap_va.c): reservations, made at first use and again
 * when one runs out, and the unclaimed extents inside them. The bottom layer: it calls only the
 * backend. */
#ifndef VMM_HEAP_VA_H
#define VMM_HEAP_VA_H

#include "heap_types.h"

/* The reservation holding va, or NULL. Reservations are append-only: callable without the lock. */
struct reservation *res_of(struct devheap *dh, vmm_devptr va);
/* Claim `size` bytes of unclaimed address space anywhere (reserving more when none is left). */
vmm_status va_alloc(struct devheap *dh, size_t size, vmm_devptr *va, vmm_error *err);
/* Claim [va, va+size) if all of it is unclaimed. */
bool va_claim_at(struct devheap *dh, vmm_devptr va, size_t size);
/* Unclaimed bytes from va on (0 when va itself is claimed or outside every reservation). */
size_t va_room_at(struct devheap *dh, vmm_devptr va);
void va_free(struct devheap *dh, vmm_devptr va, size_t size);
/* Give every reservation back (teardown: nothing may be mapped). */
void va_release_all(struct devheap *dh);

#endif
