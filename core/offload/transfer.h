/* What every part of a sleep or wake shares: the core heaps (heap_offload.h), the program's own
 * VMM mappings (app_vmm.h) and the operation over all of them (transition.h). What is selected,
 * how long the operation may take, what it did, and the one state a failure can leave behind.
 *
 * Partial. A sleep or wake that fails undoes what it did. When an undo fails too, the pieces it
 * could not bring back are never dropped: a piece whose contents are on the host stays asleep
 * with its host copy (released, its address kept), while the rest is resident. The result then
 * says how many bytes stay asleep (`partial`), the process reports itself partially asleep, and
 * a wake of the same selection completes it (a sleep of it completes it forward). Every part
 * leaves this state, and only this one, when its undo fails; a failure before the contents are
 * on the host rolls back completely. */
#ifndef VMM_OFFLOAD_TRANSFER_H
#define VMM_OFFLOAD_TRANSFER_H

#include <stdbool.h>
#include <stdint.h>

#include "../mono_wait.h"  /* vmm_now_s: the clock of vmm_limits.deadline */
#include "../vmm_error.h"

typedef struct vmm_sleep_opts {
	const char *tag;   /* NULL: every tag */
	int device;        /* -1: every device */
	bool discard;      /* true: contents are not kept (no copy) */
} vmm_sleep_opts;

typedef struct vmm_transfer_result {
	uint64_t bytes_released;   /* physical bytes given back (sleep) or re-created (wake) */
	/* Memory another process exported that this one let go of (sleep) or mapped again (wake),
	 * in a group sleep: its exporter gives it back and re-creates it, and counts it; not in
	 * bytes_released, so that a group's sum is what the driver got back. */
	uint64_t bytes_imported;
	uint64_t bytes_copied;     /* bytes copied to or from host */
	double seconds;
	/* Where the seconds went, for a caller asking why a transition is slower than its copy:
	 * holding the program's new work (the gate, sleep only), waiting for its work in flight
	 * (the drain) and copying (first copy issued to last one done, setup overlapped with it
	 * included). The rest of `seconds` is setting memory up or giving it back around them. */
	double gate_seconds, drain_seconds, copy_seconds;
	bool already;              /* nothing to do: already asleep / awake (VMM_E_ALREADY returned too) */
	/* Only with a failure whose undo failed too: the bytes that stay asleep with their host copy
	 * beside resident memory (the partial state above); 0 otherwise. */
	uint64_t partial_bytes;
} vmm_transfer_result;

/* How long an operation may take and how it learns that it should give up. NULL everywhere a
 * vmm_limits is taken: no bound, never cancelled. */
typedef struct vmm_limits {
	double deadline;    /* vmm_now_s() time: no step starts and no wait goes on past it; 0: none */
	double drain_s;     /* the longest wait for a device to finish its work; <= 0: none of its own */
	bool (*cancelled)(void *arg);   /* polled between steps and while waiting; true: roll back */
	void *arg;
} vmm_limits;

/* VMM_OK while the operation may go on; VMM_E_BUSY with why ("cancelled before <what>", "did not
 * finish within the deadline: stopped before <what>") once it must stop. */
vmm_status vmm_limits_check(const vmm_limits *lim, const char *what, vmm_error *err);

#endif
