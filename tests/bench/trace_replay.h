/* A recorded allocation trace (VMMSHIM_ALLOC_TRACE, README "Settings") replayed on the core:
 * the same mallocs and frees in the same order, so that a program's peak and the heap's work
 * can be studied on simdev without the program or its GPU. */
#ifndef VMM_BENCH_TRACE_REPLAY_H
#define VMM_BENCH_TRACE_REPLAY_H

#include <stdbool.h>
#include <stdint.h>

#include "driver_model.h"
#include "heap.h"
#include "phys_peak.h"

/* One malloc of the replay and the driver calls it made (see trace_result.costliest). */
struct costly_request {
	uint64_t size;
	uint64_t line;             /* its line in the trace, from 1 */
	struct driver_counts calls;
};

#define REPLAY_COSTLIEST 5

struct trace_result {
	uint64_t mallocs, frees;
	uint64_t skipped;          /* lines not understood, or frees of addresses never allocated */
	uint64_t failed;           /* mallocs the core refused */
	uint64_t peak_live;        /* bytes asked for, as the core counts them */
	uint64_t peak_native;      /* what cudaMalloc would hold at peak (2 MiB pages, 512 B below) */
	uint64_t peak_mapped;
	uint64_t syncs;            /* made by the replay's own calls */
	uint64_t syncs_ahead;      /* made by the core's thread (--sync-ahead) */
	uint64_t moved, cut, given_back; /* the heap's own counts: handles moved, large handles cut,
	                                  * free pieces given back for a large request */
	uint64_t uncut;            /* requests placed elsewhere so as not to cut (uncut_block) */
	uint64_t refilled, refill_claimed; /* pieces of cuts' rests made on the core's thread, and
	                                    * by requests placed on them (--refill-ahead) */
	double ns_per_call;        /* mean host ns of one malloc or free */
	double heap_ms;            /* all of the replay's time inside its mallocs and frees */
	struct driver_counts calls; /* the driver calls of the whole replay (driver_model_attach'd) */
	struct phys_peak phys;     /* the device's physical memory, where the driver says (simdev) */
	/* The mallocs whose driver calls would cost most on the H200 (driver_model.h), costliest
	 * first: where a program's allocation time goes (e.g. free pieces moved to a large
	 * request). Empty unless the model is attached. */
	struct costly_request costliest[REPLAY_COSTLIEST];
};

/* Replay the trace at path on device 0 of core; frees what is still live at the end. Returns 0,
 * or -1 with errno when the file cannot be read. one_stream: every plain malloc and free is
 * ordered on one stream, as the shim does while all of a program's work goes to one
 * (shim/lone_stream.h). */
int trace_replay(vmm_core *core, const char *path, bool one_stream, struct trace_result *out);

/* Host time between the replay's requests, spun (0: none): the program's own code, during
 * which the core's threads have the driver to themselves. */
void trace_replay_host_gap(double us);

#endif
