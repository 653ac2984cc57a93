/* Progress of the sleep or wake in progress, and counters of those done, for status, metrics and
 * the in-process callback. Written by the transition (begin, phase, end, an estimate of the bytes
 * to copy) and by the copy engine (bytes planned and issued); read at any time without waiting for
 * the operation (atomics only). A process runs one sleep or wake at a time (the shim's ctl_lock),
 * so there is one record per process. */
#ifndef VMM_OFFLOAD_PROGRESS_H
#define VMM_OFFLOAD_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>

#include "../stats_fields.h"
#include "../vmm_error.h"
#include "transfer.h"

typedef enum vmm_progress_phase {
	VMM_PHASE_NONE = 0,        /* no sleep or wake in progress */
	VMM_PHASE_PREPARING,       /* draining devices, allocating or re-creating memory */
	VMM_PHASE_COPYING,         /* contents move between device and host */
	VMM_PHASE_ROLLING_BACK,    /* it failed or was cancelled: undoing what it did */
	VMM_PHASE_DONE,            /* it ended (the last callback of an operation says so) */
} vmm_progress_phase;

typedef struct vmm_progress {
	bool sleeping;             /* sleep (true) or wake */
	vmm_progress_phase phase;
	uint64_t bytes_done;       /* handed to the copy engine's streams so far */
	uint64_t bytes_total;      /* to copy: an estimate until the copies are planned; >= done */
	double seconds;            /* since the operation began */
	double copy_seconds;       /* since its first copy began: the base of the rate */
} vmm_progress;

/* What the process's sleeps and wakes did so far: the fields and what each means are in
 * stats_fields.h (VMM_OFFLOAD_COUNTERS). */
typedef struct vmm_offload_counters {
	VMM_OFFLOAD_COUNTERS(VMM_STAT_COUNTER_MEMBER)
} vmm_offload_counters;

/* The transition: an operation begins (expected: its estimate of the bytes to copy), changes
 * phase, ends (res: what it did, NULL when it failed). */
void vmm_progress_begin(bool sleeping, uint64_t expected);
void vmm_progress_phase_set(vmm_progress_phase phase);
void vmm_progress_end(const vmm_transfer_result *res);

/* The copy engine: a transfer of `bytes` starts; `bytes` more were issued. No-ops when no
 * operation is in progress (a copy outside sleep and wake). */
void vmm_progress_plan(uint64_t bytes);
void vmm_progress_advance(uint64_t bytes);

/* The operation in progress; false (out zeroed) when none is. */
bool vmm_progress_get(vmm_progress *out);
void vmm_progress_counters(vmm_offload_counters *out);
const char *vmm_progress_phase_name(vmm_progress_phase phase);

/* A function told about progress: on begin, at most every interval_s while bytes move, on each
 * phase change and once at the end (phase DONE). It runs on the thread doing the operation, in
 * the middle of it: it must return quickly and must not sleep, wake or set the callback (that is
 * refused with VMM_E_BUSY). Replacing it (or NULL) waits until a call in progress has returned, so
 * that arg may be freed afterwards. */
typedef void (*vmm_progress_fn)(const vmm_progress *p, void *arg);
vmm_status vmm_progress_set_callback(vmm_progress_fn fn, void *arg, double interval_s,
				     vmm_error *err);
/* Is the calling thread inside the callback? (A caller with locks of its own checks this before
 * taking them: the callback may not wait for them.) */
bool vmm_progress_in_callback(void);

#endif
