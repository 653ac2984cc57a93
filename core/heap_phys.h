/* Physical handles of a device heap (heap_phys.c): the device's list of handles, taking a wholly
 * free one out of its arena, giving handles back (several side by side; the refused ones parked),
 * access grants, and the mapped bytes' accounting. Calls the block and address-space layers. */
#ifndef VMM_HEAP_PHYS_H
#define VMM_HEAP_PHYS_H

#include "heap_blocks.h"
#include "heap_types.h"
#include "heap_va.h"

void stats_mapped(struct arena *a, int64_t delta);
/* Give h (size bytes) back to the driver, retried once: a transient failure must not leak device
 * memory. Where both tries fail it is parked on dh (logged once, counted in release_pending) and
 * tried again by phys_retry_parked. */
void phys_release(struct devheap *dh, vmm_phys h, size_t size);
/* Try the parked handles again; each one the driver takes leaves the list. Returns the bytes that
 * went. Called first by every give-back of the device: heap_release_free_handles (trim, the cache
 * limit), a sleep, phys_teardown, and by growth when the driver is out of memory. */
uint64_t phys_retry_parked(struct devheap *dh);
/* Unmap [va, va+size), retried once: false when the driver refused both times (nothing logged:
 * the caller says what it keeps mapped). */
bool phys_unmap(vmm_backend *be, vmm_devptr va, size_t size);
/* h's unmap from [va, va+size) was refused twice: it is not released (a release under a mapping
 * leaves the address pointing at freed memory) but parked still mapped, with a log line saying
 * why and what; phys_retry_parked unmaps and releases it later. va_ours: the heap's address
 * space gets the range back then; otherwise a record of the heap keeps it (an asleep handle). */
void phys_park_mapped(struct devheap *dh, vmm_phys h, vmm_devptr va, size_t size, bool va_ours,
		      const char *what);
/* Unmap h from [va, va+size) (phys_unmap), then release it (phys_release); where the unmap is
 * refused, park it mapped instead (phys_park_mapped). true: unmapped and released (the range is
 * the caller's to free, as before); false: parked mapped, the range left claimed until then. */
bool phys_unmap_release(struct devheap *dh, vmm_phys h, vmm_devptr va, size_t size, bool va_ours,
			const char *what);
/* Release hs[0..n) (spread over a few threads where the backend allows): ok[i] says which went;
 * returns the first failure's status (err: its message), VMM_OK when all went. */
vmm_status phys_release_many(vmm_backend *be, const vmm_phys *hs, size_t n, bool *ok,
			     vmm_error *err);
/* Grant the owner and the peers access to [va, va+size). */
vmm_status heap_grant_access(struct devheap *dh, vmm_devptr va, size_t size, vmm_error *err);
/* The same over every mapped run of the device (a peer was added). */
vmm_status heap_regrant_all(struct devheap *dh, vmm_error *err);

bool handle_wholly_free(struct devheap *dh, struct phandle *h);
void handle_link(struct devheap *dh, struct phandle *h);
void handle_unlink(struct devheap *dh, struct phandle *h);
/* Take a wholly free, mapped handle out of its arena and unmap it (it stays created, listed). */
vmm_status handle_detach(struct devheap *dh, struct phandle *h, vmm_error *err);
/* Release an unlisted handle (counted as released by acct) and free its record. */
void handle_destroy(struct devheap *dh, struct phandle *h, struct arena *acct);
/* The same without the release: the driver handle went, or was parked, by other means. */
void handle_forget(struct devheap *dh, struct phandle *h, struct arena *acct);
/* Detach, unlink and destroy a wholly free handle. */
vmm_status handle_drop(struct devheap *dh, struct phandle *h, vmm_error *err);
/* Unmap and release the wholly free handles hs[0..n) (the releases side by side); returns the
 * bytes given back. hs is reordered. */
uint64_t heap_drop_handles(struct devheap *dh, struct phandle **hs, size_t n);
/* Give a handle's host backup back to the device's pool (nothing when it has none). */
void heap_backup_put(struct devheap *dh, vmm_host_buf *backup);
/* Teardown: unmap and release every handle of the device (and the parked ones), free the records
 * and backups. */
void phys_teardown(struct devheap *dh);

#endif
