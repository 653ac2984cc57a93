/* The control plane inside the shim: a Unix socket per process that vmmctl talks to, and the
 * sleep/wake orchestration (gate -> core offload -> app mappings) it and the in-process API share. */
#ifndef VMMSHIM_CONTROL_H
#define VMMSHIM_CONTROL_H

#include <stdbool.h>

#include "../../core/heap_offload.h"
#include "../runtime.h"

/* Start the control server for this process (called once by the runtime, on the first device
 * allocation). Failure is logged and leaves the program running without a control socket. */
vmm_status shim_control_start(shim_runtime *rt, vmm_error *err);

/* Sleep / wake the process (or one tag / device): close the gate, drain, offload the core heaps
 * and the program's own VMM mappings. hold: keep submissions held until wake (whole-process
 * sleeps from vmmctl); otherwise the gate reopens once the memory is released. */
vmm_status shim_sleep(const vmm_sleep_opts *opts, bool hold, vmm_transfer_result *res,
		      vmm_error *err);
vmm_status shim_wake(const vmm_sleep_opts *opts, vmm_transfer_result *res, vmm_error *err);

#endif
