/* Shared handles of a device heap (heap_share.c): the physical handles under an allocation that
 * another process may map (legacy IPC through the shim) are marked shared. A shared handle is
 * never moved, cached, shattered or slept, and the memory in it is never handed out again: what is
 * freed there is retired (heap_blocks.c), and once all of a shared handle is retired it is
 * unmapped and released (the other processes' references keep the memory alive for them). Calls
 * the handle, slab, block and address-space layers; heap_own.c gives an allocation a handle of its
 * own before that. */
#ifndef VMM_HEAP_SHARE_H
#define VMM_HEAP_SHARE_H

#include "heap_types.h"

/* Mark every handle under r's granules shared: free memory in them is retired at once, slabs in
 * them are frozen. VMM_E_HOST_OOM when the list of shared handles cannot grow (nothing changed
 * then for the handle that did not fit). */
vmm_status share_mark(struct devheap *dh, struct alloc *r, vmm_error *err);

/* Does [va, va+size) lie (partly) in a shared handle? */
bool share_touches(struct devheap *dh, vmm_devptr va, size_t size);

/* Release the shared handles whose memory has all been retired. Cheap when nothing was retired
 * since the last call. */
void share_settle(struct devheap *dh);

/* heap_own.c. Does r own one handle that covers its granules from its base? */
bool own_has(struct devheap *dh, const struct alloc *r);
/* Can r be given a handle of its own, and must memory move for it (*move)? VMM_E_UNSUPPORTED,
 * with the reason, when r does not start a granule or its handles cannot move. */
vmm_status own_check(struct devheap *dh, const struct alloc *r, bool *move, vmm_error *err);
/* Give r a handle of its own: copied on the device, mapped at the same address (the caller holds
 * the program's device work). On failure the old handles are in place, as they were. */
vmm_status own_move(struct devheap *dh, struct alloc *r, vmm_error *err);

#endif
