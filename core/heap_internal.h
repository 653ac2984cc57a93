/* The heap's internal layers, for the two files at its top: heap.c (the public API, heap.h) and
 * heap_offload.c (sleep and wake, heap_offload.h) with the files under it, each with its header
 * (heap_sleep.h, heap_wake.h, heap_backups.h) and what they share in heap_transfer_common.h.
 * Nothing outside core/ includes this.
 *
 * Each file calls only the files below it (no file calls back up; heap_types.h holds the
 * structures they share):
 *
 *   heap.c, heap_offload.c  the public API; sleep and wake: the devices, the undo
 *   heap_sleep.c    one device's sleep: plan, copy out, release, undo a failure
 *                   -> wake, backups, coalesce, tail, records, slab, phys
 *   heap_wake.c     one device's wake: handles restored in batches       -> backups, phys
 *   heap_backups.c  host backups of handles, their copy ranges, the copy engine
 *                   -> coalesce, phys, blocks
 *   heap_coalesce.c a sleep's runs of adjacent handles become one        -> phys, blocks, va
 *   heap_tail.c     a large asleep handle's tail becomes one of its own  -> phys, blocks
 *   heap_share.c    exported allocations, shared handles pinned and retired (vmm_share.h)
 *                   -> own, phys, slab, blocks, va
 *   heap_own.c      an exported allocation given one handle of its own (moved on the device)
 *                   -> release, phys, blocks, va
 *   heap_fit.c      block services: find, else sync and reclaim, else grow; the OOM ladder
 *                   -> grow, release, records, slab, phys, blocks
 *   heap_release.c  wholly free handles given back, the refill ahead settled first
 *                   -> refill, phys
 *   heap_device.c   device heaps (made at first use, torn down) and per-tag arenas
 *                   -> records, slab, phys, va
 *   heap_grow.c     growth: wholly free handles moved from anywhere, then new ones
 *                   -> phys, blocks, va
 *   heap_ahead.c    syncing ahead: the core's thread syncs the device and reclaims the
 *                   quarantine up to the free that came before it          -> records
 *   heap_records.c  allocation records: index by base, quarantine, reclaim after a sync
 *                   -> slab, blocks
 *   heap_slab.c     small allocations packed in one-granule slabs        -> blocks
 *   heap_phys.c     physical handles: list, detach, release, access       -> blocks, va
 *   heap_blocks.c   blocks, per-page index, TLSF free index               -> va
 *   heap_va.c       address space: reservations and unclaimed extents     -> the backend only
 *   heap_keep.c     exported allocations' kept descriptors (heap_keep.h)  -> nothing
 */
#ifndef VMM_HEAP_INTERNAL_H
#define VMM_HEAP_INTERNAL_H

#include "heap_blocks.h"
#include "heap_device.h"
#include "heap_fit.h"
#include "heap_grow.h"
#include "heap_phys.h"
#include "heap_records.h"
#include "heap_slab.h"
#include "heap_types.h"
#include "heap_va.h"

#endif
