/* The control plane inside the shim: a Unix socket per process that vmmctl talks to, and the
 * sleep/wake orchestration (gate -> core offload -> app mappings) it and the in-process API share. */
#ifndef VMMSHIM_CONTROL_H
#define VMMSHIM_CONTROL_H

#include <stdbool.h>

#include "../../core/heap_offload.h"
#include "../runtime.h"

/* Start the control server for this process (called once by lifecycle.c, on the first device
 * allocation). Failure is logged and leaves the program running without a control socket. */
vmm_status shim_control_start(shim_runtime *rt, vmm_error *err);

/* Sleep / wake the process (or one tag / device): close the gate, drain, offload the core heaps
 * and the program's own VMM mappings. hold: keep submissions held until wake (whole-process
 * sleeps from vmmctl); otherwise the gate reopens once the memory is released. */
vmm_status shim_sleep(const vmm_sleep_opts *opts, bool hold, vmm_transfer_result *res,
		      vmm_error *err);
vmm_status shim_wake(const vmm_sleep_opts *opts, vmm_transfer_result *res, vmm_error *err);

/* How an automatic wake (VMMSHIM_AUTOWAKE: device work submitted while asleep) gets its memory:
 * NULL, the default, wakes at once; GPU sharing sets share_autowake, which first makes room
 * under its rules (lifecycle.c sets it right after the server starts). */
void control_set_autowake_waker(void (*waker)(void));

/* Keep sleeps and wakes out while the program does something they must not overlap (a reset
 * of a primary context): waits for the one in progress, or for a look at the state, at most
 * wait_ms (> 0). false: not taken in time (nothing to end). */
bool control_exclusive_begin(int wait_ms);
void control_exclusive_end(void);
/* What runs once the exclusion above is let go by whatever held it long (a sleep or wake, a
 * status look of the control server, another exclusive holder), on the thread that held it:
 * something the program left for then (a last release of a primary context that could not
 * wait). Not after the brief looks of the program's own threads (an allocation asking whether
 * the process is held), which may hold heap locks. NULL: nothing. */
void control_set_when_unlocked(void (*fn)(void));

/* Process exit (the runtime's and the server's exit handlers): stop serving sleep and wake. The
 * one in progress is cancelled and waited for (at most CONTROL_EXIT_WAIT_MS from the first call, whoever calls) for it to roll back. true: nothing
 * runs any more (no abandoned device drain either), so the runtime may be freed; false: it must
 * be left to the end of the process. */
#define CONTROL_EXIT_WAIT_MS 5000
bool control_sleep_shutdown(void);

#endif
