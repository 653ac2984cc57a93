/* The core's statistics, each kind in one list: adding a counter is one line here. From these
 * lists come the structs (vmm_stats, vmm_app_stats, vmm_copy_stats, the arena's counters), the
 * sum of a heap's arenas (heap.c), the status reply's records (shim/control/dispatch.c) and the
 * public API's copy (shim/control/public_api.c); the sleep/wake counters likewise give their
 * struct (core/offload/progress.h) and the status reply's counters record. The shim's own pass-through counters have their
 * list beside them (shim/runtime.h, SHIM_PASSTHROUGH_STATS).
 *
 * A list is a macro that calls X once per field, in the order of the struct and of the records. */
#ifndef VMM_STATS_FIELDS_H
#define VMM_STATS_FIELDS_H

/* Where the status reply carries a heap figure: its device record, its tag record. */
#define VMM_STAT_DEVICE 1
#define VMM_STAT_TAG 2
#define VMM_STAT_BOTH (VMM_STAT_DEVICE | VMM_STAT_TAG)

/* The heap's figures of a device and tag (vmm_stats, heap.h). Bytes are physical unless said
 * otherwise. X(field, source, wire, records, public):
 * - source ARENA: the sum of each arena's counter of the same name (struct arena_stats);
 *   OWN: computed by vmm_stats_get itself;
 * - wire: the field's name in the status reply's records; records: which records carry it;
 * - public PUBLIC: vmmshim_stats_t has it (shim/vmmshim.h, an installed ABI: a new public field
 *   is appended there by hand, and public_api.c checks at compile time that both agree). */
#define VMM_HEAP_STATS(X)                                                                      \
	/* sum of the sizes asked for by live allocations */                                   \
	X(live_bytes, ARENA, "live", VMM_STAT_BOTH, PUBLIC)                                    \
	X(live_count, ARENA, "count", VMM_STAT_BOTH, PUBLIC)                                   \
	/* physical memory mapped (live + cached) */                                           \
	X(mapped_bytes, ARENA, "mapped", VMM_STAT_BOTH, PUBLIC)                                \
	/* mapped but not used by a live allocation (incl. quarantined) */                     \
	X(cached_bytes, OWN, "cached", VMM_STAT_BOTH, PUBLIC)                                  \
	/* of those, freed by the program and waiting for a device synchronization before they \
	 * are reused (heap_records.c's quarantine; usable bytes) */                           \
	X(quarantined_bytes, OWN, "quarantined", VMM_STAT_BOTH, PRIVATE)                       \
	/* virtual address space reserved */                                                   \
	X(reserved_bytes, OWN, "reserved", VMM_STAT_DEVICE, PUBLIC)                            \
	/* physical memory released by sleep, to be re-created at wake */                      \
	X(asleep_bytes, ARENA, "asleep", VMM_STAT_BOTH, PUBLIC)                                \
	/* host memory holding sleeping contents */                                            \
	X(host_backup_bytes, ARENA, "host_backup", VMM_STAT_BOTH, PUBLIC)                      \
	X(peak_live_bytes, OWN, "peak_live", VMM_STAT_DEVICE, PUBLIC)                          \
	X(peak_mapped_bytes, OWN, "", 0, PRIVATE)                                              \
	X(alloc_calls, ARENA, "", 0, PUBLIC)                                                   \
	X(free_calls, ARENA, "", 0, PUBLIC)                                                    \
	X(handles_created, ARENA, "handles_created", VMM_STAT_DEVICE, PRIVATE)                 \
	X(handles_released, ARENA, "handles_released", VMM_STAT_DEVICE, PRIVATE)               \
	/* released, but the driver would not take them back: tried again at every give-back */ \
	X(release_pending_bytes, OWN, "release_pending", VMM_STAT_DEVICE, PRIVATE)             \
	/* device synchronizations made to reuse quarantined memory, and the reuses that needed \
	 * none because no device work was submitted since the last one (heap_records.c) */     \
	X(syncs, ARENA, "syncs", VMM_STAT_DEVICE, PRIVATE)                                     \
	X(syncs_skipped, ARENA, "syncs_skipped", VMM_STAT_DEVICE, PRIVATE)                     \
	/* made on the core's thread ahead of need (heap_ahead.c; not in syncs) */              \
	X(syncs_ahead, ARENA, "syncs_ahead", VMM_STAT_DEVICE, PRIVATE)                         \
	/* of the program's reuses, those that waited for a sync ahead in flight rather than    \
	 * synchronize the device (heap_ahead.h, ahead_wait; not in syncs) */                   \
	X(syncs_waited, ARENA, "syncs_waited", VMM_STAT_DEVICE, PRIVATE)                       \
	/* what growth did with handles (heap_grow.c's tally; a device's, not a tag's): wholly   \
	 * free ones mapped again at a new address, large ones re-created as smaller ones for a \
	 * request that shares them, free pieces given back for a large request */              \
	X(handles_moved, OWN, "", 0, PRIVATE)                                                  \
	X(handles_cut, OWN, "", 0, PRIVATE)                                                    \
	/* requests placed in another free block so as to cut no large handle (uncut_block) */   \
	X(cuts_avoided, OWN, "", 0, PRIVATE)                                                   \
	X(pieces_given_back, OWN, "", 0, PRIVATE)                                              \
	/* of those, before the sync the request waited for (while the GPU still ran) */        \
	X(pieces_given_back_early, OWN, "", 0, PRIVATE)                                        \
	/* refilling ahead (heap_refill.h): pieces of cuts' free rests made on the core's       \
	 * thread, and those made by a request placed on them before the thread came to them */ \
	X(pieces_refilled, OWN, "", 0, PRIVATE)                                                \
	X(pieces_refill_claimed, OWN, "", 0, PRIVATE)                                          \
	/* legacy IPC (heap_share.c): bytes in handles another process may map (they stay      \
	 * resident), and of those the bytes freed but not reusable; the status reply carries   \
	 * them for the sides with legacy IPC only (dispatch.c, put_shared) */                 \
	X(shared_bytes, ARENA, "", 0, PRIVATE)                                                 \
	X(retired_bytes, ARENA, "", 0, PRIVATE)

/* The program's own VMM handles on a device (vmm_app_stats, app_vmm.h); all in the status reply's
 * device record. X(field, wire). */
#define VMM_APP_STATS(X)                                                                       \
	/* live handles the program created, and their bytes */                                \
	X(handles, "app_handles")                                                              \
	X(handle_bytes, "app_bytes")                                                           \
	X(mapped_bytes, "app_mapped")                                                          \
	X(asleep_bytes, "app_asleep")                                                          \
	X(host_backup_bytes, "app_host_backup")                                                \
	/* exported and imported handles: stay while asleep */                                 \
	X(unreleasable_bytes, "app_unreleasable")                                              \
	/* ...of which shared with other processes (exported or imported); the rest is mapped  \
	 * in part where the backend cannot map part of a handle again */                      \
	X(shared_bytes, "app_shared")

/* One copy of the offload engine (vmm_copy_stats, copy_engine.h). X(type, field). */
#define VMM_COPY_STATS(X)                                                                      \
	X(uint64_t, bytes)                                                                     \
	X(double, seconds)                                                                     \
	/* of which spent provisioning host memory */                                          \
	X(double, provision_seconds)                                                           \
	/* copies waited for provisioning (the overlap's shortfall) */                         \
	X(double, provision_wait_seconds)                                                      \
	/* went through the pinned staging ring (host not pinnable) */                         \
	X(uint64_t, staged_bytes)

/* What the process's sleeps and wakes did so far (vmm_offload_counters, offload/progress.h); all
 * in the status reply's counters record. X(type, field, wire). */
#define VMM_OFFLOAD_COUNTERS(X)                                                                \
	/* successful ones; failures counted apart */                                          \
	X(uint64_t, sleeps, "sleeps")                                                          \
	X(uint64_t, wakes, "wakes")                                                            \
	X(uint64_t, failures, "failures")                                                      \
	/* copied device -> host, host -> device */                                            \
	X(uint64_t, bytes_out, "bytes_out")                                                    \
	X(uint64_t, bytes_in, "bytes_in")                                                      \
	X(double, sleep_seconds, "sleep_seconds")                                              \
	X(double, wake_seconds, "wake_seconds")

/* Helpers for the lists above: a struct member of the field, for any list's X. */
#define VMM_STAT_U64_MEMBER(field, ...) uint64_t field;
#define VMM_STAT_TYPED_MEMBER(type, field) type field;
#define VMM_STAT_COUNTER_MEMBER(type, field, wire) type field;

#endif
