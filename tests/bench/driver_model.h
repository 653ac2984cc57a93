/* Counts the driver calls the core makes through a backend and adds up what they would cost on
 * the H200 (the per-call figures measured in one run there, by handle size; see driver_model.c
 * for the table and what the model assumes). It waits for nothing: the benchmark runs at simdev
 * speed and prints the modelled driver time beside its own figures. */
#ifndef VMM_BENCH_DRIVER_MODEL_H
#define VMM_BENCH_DRIVER_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "backend/backend.h"

struct driver_counts {
	uint64_t creates, maps, unmap_calls, unmapped, access_calls, access_handles, releases;
	uint64_t syncs;
	double us;              /* modelled driver time, every call one after another */
	double release_us;      /* the part of it spent in releases */
	double after_sync_us;   /* the part of it a thread spent after it synchronized the device
				 * inside one operation (driver_model_op_begin): with the GPU's queue
				 * drained, a GPU-bound program waits for all of it */
	double own_thread_us;   /* the part of it spent on the core's own threads (those that
				 * never began an operation): the refill thread's, beside the
				 * program's */
	double call_us;         /* wall time measured inside the calls here (simdev's, when on it),
				 * summed over threads: the rest of an operation is the core's own */
};

/* Wrap be's physical-memory calls (until driver_model_detach); counts start at zero. */
void driver_model_attach(vmm_backend *be);
void driver_model_detach(vmm_backend *be);
struct driver_counts driver_model_get(void);
/* Real time: each call, on whichever thread, also takes its modelled time (spun, one call at a
 * time across threads: the driver serializes its per-handle work), so that what a thread of
 * the core does beside the program shows in the program's own time. */
void driver_model_realtime(bool on);
/* The calling thread starts an operation (a malloc): its driver time after a sync inside it
 * counts as after_sync_us. */
void driver_model_op_begin(void);
/* b - a, field by field. */
struct driver_counts driver_counts_sub(struct driver_counts b, struct driver_counts a);

#endif
