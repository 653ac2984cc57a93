/* Allocations of the core that another process maps (legacy CUDA IPC through the shim): the
 * public side of heap_share.c. An exported allocation keeps its physical memory where it is for
 * the rest of the process: that memory stays resident through sleep and is never handed out again
 * by this heap (what is freed there is retired; a handle whose memory is all retired is released,
 * and the importers' own references keep it alive for them). */
#ifndef VMM_SHARE_H
#define VMM_SHARE_H

#include <stddef.h>
#include <stdint.h>

#include "heap.h"

/* An exported allocation. The span is the granule-aligned range around it that an importer maps
 * (the neighbours' bytes in its edge granules come along, as the driver's legacy IPC shows the
 * whole underlying allocation). */
typedef struct vmm_share_info {
	int device;
	vmm_devptr base;        /* the allocation's base here */
	size_t size;            /* its size as asked for */
	uint64_t id;            /* names it to other processes; never reused in this process */
	vmm_devptr span;        /* granule-aligned start of what an importer maps */
	size_t span_size;
	/* The allocation starts at offset 0 of one physical handle that covers the span: the
	 * handle behind its base is the allocation's own (what cuMemRetainAllocationHandle users
	 * such as NCCL expect). */
	bool own_handle;
} vmm_share_info;

/* One piece of a span: [offset, offset+size) of the span is [handle_offset, +size) of the handle
 * behind fd. */
typedef struct vmm_share_piece {
	int fd;                 /* owned by the caller after vmm_share_fds */
	size_t offset, size, handle_offset;
} vmm_share_piece;

#define VMM_SHARE_MAX_PIECES 1024   /* a span below 2 GiB in 2 MiB pieces, with room */

/* Export the allocation containing ptr (any address in it): its id (the same on every call) and
 * span. VMM_E_NOT_OURS when ptr is in no live allocation; VMM_E_UNSUPPORTED when the backend
 * cannot export memory as file descriptors or the span needs more than VMM_SHARE_MAX_PIECES. */
vmm_status vmm_share_export(vmm_core *core, vmm_devptr ptr, vmm_share_info *out, vmm_error *err);

/* Through a handle (cuMemRetainAllocationHandle, NCCL's user-buffer registration): the
 * allocation containing ptr must start at offset 0 of one physical handle that covers it.
 * vmm_share_own_plan says whether memory must move for that (*move); VMM_E_UNSUPPORTED when it
 * cannot be done (the allocation does not start a granule: allocations below one granule but
 * above the slab sizes, or slab slots; its handles are shared with another process already).
 * vmm_share_own gives the allocation that handle (a new one, the contents copied on the device,
 * mapped at the same address; other allocations' bytes in its last granule move along with it
 * and stay where they are) and then exports it as vmm_share_export does, without asking for file
 * descriptors. The caller must hold every submission of the program while it runs. */
vmm_status vmm_share_own_plan(vmm_core *core, vmm_devptr ptr, bool *move, vmm_error *err);
vmm_status vmm_share_own(vmm_core *core, vmm_devptr ptr, vmm_share_info *out, vmm_error *err);

/* New file descriptors for the pieces of the exported allocation at base with that id (both must
 * match: a freed allocation's id is gone). VMM_E_NOT_OURS when there is no such export. They are
 * duplicates of the kept ones when the export is kept (*exported false, when exported is not
 * NULL), else exported now (*exported true) and kept too where the budget allows. Within
 * bounded reads (heap.h) VMM_E_BUSY when the heap's allocator holds it past them. */
vmm_status vmm_share_fds(vmm_core *core, vmm_devptr base, uint64_t id, vmm_share_info *info,
			 vmm_share_piece *pieces, size_t max, size_t *n, bool *exported,
			 vmm_error *err);

/* vmm_share_fds without waiting, for a caller that must never block (the control server's
 * reading thread): duplicates of the kept descriptors when the heap's lock is free at once and
 * the export is kept. Any error (VMM_E_BUSY: the lock is held or nothing is kept) means they
 * cannot be had at once, and nothing was done: ask vmm_share_fds, which may wait. */
vmm_status vmm_share_fds_now(vmm_core *core, vmm_devptr base, uint64_t id,
			     vmm_share_info *info, vmm_share_piece *pieces, size_t max, size_t *n,
			     vmm_error *err);

/* Kept exports. Exporting the pieces of a large allocation takes the driver about a millisecond
 * per GiB, so the exporter does it ahead (after the legacy IPC get, on a thread of its own) and
 * keeps the descriptors until the memory goes: the allocation is freed, a group sleep releases its
 * handles, the core is destroyed. A kept descriptor holds the physical memory for the driver, and
 * counts against the process's descriptors: a core keeps at most an eighth of RLIMIT_NOFILE's
 * soft limit and at most VMM_SHARE_KEEP_MAX; beyond that exports are made at each open.
 * vmm_share_keep exports the pieces of the export at base with that id now and keeps them:
 * *kept true when they are kept (now or already), false when the budget does not allow it (no
 * export then). The driver's export runs without the heap's lock (the program allocates and
 * frees meanwhile; the handles stay until it ends): VMM_E_NOT_OURS as vmm_share_fds, also when
 * the allocation was freed meanwhile; VMM_E_BUSY while asleep, or when a group sleep may release
 * it or its memory moved meanwhile (nothing kept then). */
#define VMM_SHARE_KEEP_MAX 4096
vmm_status vmm_share_keep(vmm_core *core, vmm_devptr base, uint64_t id, bool *kept,
			  vmm_error *err);
/* Descriptors kept now (all devices). */
size_t vmm_share_kept_fds(vmm_core *core);
/* In a forked child, single-threaded: close every kept descriptor (the child must not hold the
 * parent's memory), without the heaps' locks. */
void vmm_share_keep_after_fork(vmm_core *core);

/* A group sleep whose members hold every mapping of this process's exports (tools/group.c)
 * allows (true) the next sleep to copy out and release its shared handles too, not those the
 * program retained; false again afterwards. Their contents come back at wake, at the same
 * addresses, in new handles that importers fetch again (vmm_share_fds refuses while asleep).
 * Allowing closes the kept descriptors (they would pin the memory), and none are kept while it is
 * allowed. */
void vmm_share_release_allow(vmm_core *core, bool allow);

/* Bytes of dev's shared handles that a group sleep released (asleep, re-created at wake). */
uint64_t vmm_share_asleep_bytes(vmm_core *core, int dev);

/* The live exported allocations (up to max); returns how many there are. */
size_t vmm_share_list(vmm_core *core, vmm_share_info *out, size_t max);

/* Bytes of dev's heap in shared handles, and of those the bytes retired (freed, not reusable). */
void vmm_share_bytes(vmm_core *core, int dev, uint64_t *shared, uint64_t *retired);

#endif
