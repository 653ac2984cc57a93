/* Kept exports (heap_keep.c): the descriptors of an exported allocation's pieces, exported once
 * (ahead of any importer, at the legacy IPC get) and kept, so that each open sends duplicates
 * instead of exporting again. A kept descriptor holds its physical memory for the driver: the
 * record is dropped (its descriptors closed) whenever that memory must go, i.e. when the
 * allocation is freed, when a handle under it is destroyed, before a group sleep releases shared
 * handles, at teardown. At most keep_budget() descriptors are kept per core. All calls hold the
 * device heap's lock except keep_close (and keep_after_fork); the lists also change only under a
 * leaf lock of this file that a fork waits for, so that a forked child finds them whole. A leaf
 * layer: calls nothing of the heap's. */
#ifndef VMM_HEAP_KEEP_H
#define VMM_HEAP_KEEP_H

#include "heap_types.h"
#include "vmm_share.h"

/* One exported allocation's kept descriptors, pieces[i].fd owned by the record. */
struct kept_export {
	uint64_t id;
	vmm_devptr span;
	size_t span_size;
	struct kept_export *next;   /* a detached list (keep_detach_*) */
	size_t n;
	vmm_share_piece pieces[];
};

/* How many descriptors a core may keep: an eighth of RLIMIT_NOFILE's soft limit, at most
 * VMM_SHARE_KEEP_MAX. */
size_t keep_budget(void);

/* The record of export id, or NULL. */
struct kept_export *keep_find(struct devheap *dh, uint64_t id);

/* Keep pieces[0..n) of export id over [span, span+span_size): true when kept (the record owns
 * the descriptors now), false when the budget or host memory does not allow it (they stay the
 * caller's). */
bool keep_store(struct devheap *dh, uint64_t id, vmm_devptr span, size_t span_size,
		const vmm_share_piece *pieces, size_t n);

/* Duplicates of k's descriptors into out (owned by the caller). On failure nothing is left
 * open. */
vmm_status keep_dup(const struct kept_export *k, vmm_share_piece *out, size_t max,
		    vmm_error *err);

/* Take records out of the heap's list, to be closed with keep_close once the lock is dropped
 * (closing a descriptor of device memory takes a while): the one of export id; those whose span
 * meets [va, va+size); all of them. Each returns a list (NULL: none). */
struct kept_export *keep_detach_id(struct devheap *dh, uint64_t id);
struct kept_export *keep_detach_range(struct devheap *dh, vmm_devptr va, size_t size);
struct kept_export *keep_detach_all(struct devheap *dh);

/* Close a detached list's descriptors and free it (no lock needed). */
void keep_close(struct vmm_core *core, struct kept_export *list);

/* In a forked child (one thread): close and forget every record of dh without its lock (the
 * fork waited for any change of a list to end); the child keeps no descriptor in the count. */
void keep_after_fork(struct devheap *dh);

#endif
