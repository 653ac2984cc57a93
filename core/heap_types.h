/* The heap's data structures, shared by every heap file (the functions are declared in each
 * layer's own header: see heap_internal.h for the layers). Nothing outside core/ includes this.
 *
 * Per device (struct devheap, one mutex): VA reservations with a page table each, the physical
 * handles, the address-ordered list of blocks over mapped memory, and one arena per tag. An arena
 * owns blocks and handles; its free blocks sit in a TLSF-like segregated index (O(1) search), its
 * small allocations in slabs, its freed allocations in a quarantine until a device sync. */
#ifndef VMM_HEAP_TYPES_H
#define VMM_HEAP_TYPES_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "offload/copy_engine.h"
#include "heap.h"

#define HEAP_ALIGN 256u            /* every block size and address is a multiple */
#define TLSF_SL_LOG2 4             /* 16 second-level lists per power of two */
#define TLSF_SL_COUNT (1u << TLSF_SL_LOG2)
#define TLSF_LINEAR_LIMIT (HEAP_ALIGN << TLSF_SL_LOG2)   /* below: one list per 256 bytes */
#define TLSF_FL_COUNT 48
#define MAX_RESERVATIONS 64
#define MAX_ARENAS 64
#define NUM_CLASSES 64

/* BLK_RETIRED: freed memory inside a shared handle (heap_share.c), never used again. */
enum blk_state { BLK_FREE, BLK_USED, BLK_QUAR, BLK_SLAB, BLK_RETIRED };

struct arena;
struct slab;
struct alloc;

/* A run of mapped address space owned by one arena. prev/next link address-adjacent blocks of
 * the device (any arena); fprev/fnext link free blocks in the arena's index. */
struct blk {
	vmm_devptr addr;
	size_t size;
	struct blk *prev, *next;
	struct blk *fprev, *fnext;
	struct arena *arena;
	struct alloc *alloc;    /* BLK_USED / BLK_QUAR: the allocation */
	struct slab *slab;      /* BLK_SLAB */
	uint8_t state;
	uint8_t fl, sl;         /* the free list it sits in (BLK_FREE) */
};

/* A live or quarantined allocation: what free() and lookup() find. */
struct alloc {
	vmm_devptr base;
	size_t size;            /* asked for */
	size_t usable;
	struct arena *arena;
	struct blk *blk;        /* large: its block; small: the slab's block */
	struct slab *slab;      /* NULL for large allocations */
	uint32_t slot;
	bool quarantined;
	bool stream_ordered;    /* freed on `stream` (which may be the NULL default stream) */
	uint64_t share_id;      /* exported to other processes (heap_share.c); 0: not */
	vmm_stream stream;
	struct alloc *hnext;    /* hash chain */
	struct alloc *qprev, *qnext;
	uint64_t qseq;          /* quarantine order (devheap.quar_seq when it was freed) */
};

struct slab {
	struct blk *blk;
	struct arena *arena;
	int cls;
	size_t slot_size;
	size_t bytes;               /* nslots * slot_size: its block's size */
	uint32_t nslots, nused; /* nused: live + quarantined */
	uint32_t free_top;
	uint32_t *free_stack;
	struct alloc **slots;
	struct slab *prev, *next;   /* the class's list of slabs with a free slot */
	bool listed;
	bool frozen;                /* inside a shared handle: hands out no slot again */
};

/* A handle the driver would not take back (its release failed twice), or would not unmap (then
 * it was not released: a mapped handle must not be): kept on its device heap and unmapped and
 * released again at the device's next give-back (heap_phys.c), rather than forgotten. */
struct parked_phys {
	vmm_phys h;
	size_t size;
	vmm_devptr va;          /* still mapped at [va, va+size); 0: unmapped */
	bool va_ours;           /* the heap's address space gets [va, va+size) back once unmapped */
};

/* A physical handle of the device, mapped at va (or asleep: released, to be re-created at va). */
struct phandle {
	vmm_phys h;
	size_t size;
	vmm_devptr va;          /* 0: not mapped */
	struct arena *arena;
	bool asleep;
	bool has_backup;        /* backup holds the contents while asleep */
	vmm_host_buf backup;    /* kept across cycles and reused */
	/* Shared (heap_share.c): another process may map it. Never moved, split, cached or slept;
	 * the memory in it is never reused; released once everything in it is retired. */
	bool shared;
	/* A group sleep whose members hold every mapping of it may release it too (copied out
	 * whole, retired bytes included: an importer may still read them); never a handle the
	 * program retained (its handle value names this physical memory). */
	bool release_ok;
	bool retained;
	struct phandle *prev, *next;
};

struct va_extent {
	vmm_devptr va;
	size_t size;
};

struct reservation {
	vmm_devptr base;
	size_t size;
	size_t npages;
	struct blk **page_first;        /* lowest-address block starting in each page */
	struct phandle **page_handle;   /* the handle mapped (or asleep) over each page */
	struct va_extent *free;         /* unclaimed VA, address order */
	size_t nfree, cap_free;
};

/* An arena's counters: the VMM_HEAP_STATS fields summed from arenas (source ARENA), and what
 * vmm_stats_get computes the others from. */
#define ARENA_MEMBER_ARENA(field) uint64_t field;
#define ARENA_MEMBER_OWN(field)
#define ARENA_MEMBER(field, source, ...) ARENA_MEMBER_##source(field)
struct arena_stats {
	VMM_HEAP_STATS(ARENA_MEMBER)
	uint64_t live_usable;           /* bytes reserved for live allocations (>= live_bytes) */
	uint64_t peak_live_bytes, peak_mapped_bytes;
};

struct arena {
	struct devheap *dh;
	char tag[VMM_TAG_MAX];
	uint64_t fl_map;
	uint32_t sl_map[TLSF_FL_COUNT];
	struct blk *lists[TLSF_FL_COUNT][TLSF_SL_COUNT];
	struct alloc *quar_head;
	uint64_t quar_bytes;
	struct slab *partial[NUM_CLASSES];
	size_t slab_bytes[NUM_CLASSES]; /* bytes of the class's slabs with a block */
	bool asleep;
	bool discarded;         /* asleep without a host copy */
	bool asleep_in_part;    /* asleep, but a failed sleep's undo left some handles mapped */
	bool marked;            /* changed by the sleep/wake in progress (for its rollback) */
	struct arena_stats st;
};

/* What growth did since the heap was made (heap_grow.c), for the log line of a slow allocation
 * (heap_fit.c). */
struct grow_tally {
	uint64_t moved;         /* wholly free handles mapped again at a new address */
	uint64_t recycled;      /* larger idle handles given back so that new memory is made */
	uint64_t shattered;     /* large handles re-created as pieces (handle_shatter) */
	uint64_t uncut;         /* requests placed in another block so as not to cut one */
	uint64_t refilled;      /* pieces of a cut's free rest made on the refill thread */
	uint64_t refill_claimed; /* pieces of a queued rest made by a request placed on them */
	uint64_t given_back;    /* free pieces given back for a large request (plan_give_back) */
	uint64_t given_back_early; /* of those, before the request's sync (arena_give_back_early) */
};

struct devheap {
	pthread_mutex_t lock;
	struct vmm_core *core;
	int dev;
	size_t gran;
	size_t total_mem;
	_Atomic size_t nres;    /* reservations are append-only: readable without the lock */
	struct reservation res[MAX_RESERVATIONS];
	struct phandle *handles;        /* every handle of the device */
	/* Released, but the driver would not take them back: retried at every give-back of the
	 * device; parked_bytes is the status figure release_pending. */
	struct parked_phys *parked;
	size_t nparked, cap_parked;
	uint64_t parked_bytes;
	struct arena *arenas[MAX_ARENAS];
	int narenas;
	int peers[VMM_MAX_DEVICES];
	int npeers;
	/* base -> allocation */
	struct alloc **hash;
	size_t hash_mask, hash_count;
	/* object pools (free lists) */
	struct blk *blk_pool;
	struct alloc *alloc_pool;
	uint64_t quar_total;
	uint64_t cut_since_sync;        /* bytes cut from large free blocks (heap_fit.c) */
	/* The backend's submission count read just before the last successful reclaim's
	 * synchronization began (heap_records.c); valid only when synced_known. */
	uint64_t synced_submissions;
	bool synced_known;
	/* Syncing ahead (heap_ahead.c): the last free's quarantine number; a sync in flight on the
	 * core's thread for the quarantine up to ahead_upto, with the submission count read
	 * before it began. */
	uint64_t quar_seq;
	bool ahead_running;
	uint64_t ahead_upto, ahead_before;
	/* The number of the sync ahead in flight (counted from 1), and whether the program's thread
	 * reclaimed what it covers already (ahead_wait). */
	uint64_t ahead_gen;
	bool ahead_taken;
	struct grow_tally tally;
	/* In the page index where a queued refill's pages are (heap_refill.c): not memory. */
	struct phandle refill_mark;
	/* Bytes of free pieces the request in progress gave back before its sync
	 * (arena_give_back_early): its growth takes that much less from free memory and makes it
	 * new instead. Cleared when the request ends. */
	size_t given_back_ahead;
	/* Seconds the heap's own syncs (heap_reclaim) waited in all, and when the last one ended:
	 * a slow request's log line says how long it waited and how long it took after. */
	double sync_wait_s, sync_done_s;
	/* When the program's thread began waiting for the device with the lock held (heap_reclaim,
	 * ahead_wait), on vmm_now_ms's clock; 0: it does not. Read without the lock. */
	atomic_llong lock_wait_since_ms;
	/* Pointer queries reading the heap meanwhile, without the lock (heap_reads.h: heap_view):
	 * the waiting thread changes nothing before they are done. */
	atomic_int viewers;
	bool trim_syncing;      /* a trim waits for the device without the lock (heap_trim.c) */
	/* Host backups of the handles, carved from the offload engine's pool (created with the
	 * first backup). The hooks keep the allocator free of a link-time dependency on it. */
	struct vmm_backup_pool *backups;
	void (*backup_put)(struct vmm_backup_pool *pool, vmm_host_buf *buf);
	void (*backups_destroy)(struct vmm_backup_pool *pool);
	vmm_copy_engine *ce;    /* the offload engine's, created at the first sleep */
	void (*ce_destroy)(vmm_copy_engine *ce);
	uint64_t live_total, live_req, mapped_total, peak_live, peak_mapped;
	/* Shared handles (heap_share.c); share_check: a block in one was retired since the last
	 * look, so one of them may be all retired now. */
	struct phandle **shared;
	size_t nshared, cap_shared;
	bool share_check;
	/* Exported allocations' kept descriptors (heap_keep.c). */
	struct kept_export *kept;
	/* Exports running without the lock (vmm_share_keep): while any does, no shared handle is
	 * released (share_settle, vmm_share_release_allow wait for them). */
	unsigned exports_running;
};

struct vmm_core {
	vmm_backend *be;
	vmm_config cfg;
	pthread_mutex_t init_lock;
	struct devheap *_Atomic heaps[VMM_MAX_DEVICES];
	int ndev;
	_Atomic uint64_t last_share_id;
	_Atomic size_t kept_fds;        /* descriptors kept by all heaps (heap_keep.c) */
	struct ahead *_Atomic ahead;    /* the sync-ahead thread (heap_ahead.c), from its first use */
	bool ahead_failed;              /* no thread could be had: not tried again */
	struct refill *_Atomic refill;  /* the refill thread (heap_refill.c), from its first use */
	bool refill_failed;
	atomic_int trims_out;           /* trims that may use a heap without its lock (heap_trim.c) */
	atomic_bool closing;            /* the core's destroy has begun: no trim starts */
};

static inline size_t align_up(size_t v, size_t a)
{
	return (v + a - 1) & ~(a - 1);
}

#endif
