/* Shared handles of a device heap (heap_share.c): the physical handles under an allocation that
 * another process may map (legacy IPC through the shim) are marked shared. A shared handle is
 * never moved, cached, shattered or slept, and the memory in it is never handed out again: what is
 * freed there is retired (heap_blocks.c), and once all of a shared handle is retired it is
 * unmapped and released (the other processes' references keep the memory alive for them). Calls
 * the handle, slab, block and address-space layers. */
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

#endif
