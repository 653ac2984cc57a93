/* The importer's side of re-sharing the program's own VMM memory after a group sleep
 * (app_refetch.c): ask the exporting process for a new descriptor of its handle. The app
 * registry calls it at wake (vmm_app_set_refetch). */
#ifndef VMMSHIM_APP_REFETCH_H
#define VMMSHIM_APP_REFETCH_H

#include <stdint.h>
#include <sys/types.h>

#include "../core/backend/backend.h"
#include "../core/vmm_error.h"

/* exporter_start: its start time when the group slept (0: unknown); a pid that names a process
 * of another start time is not asked (it reused the pid: VMM_E_NOT_OURS, as for one that ended). */
vmm_status shim_app_refetch(pid_t exporter, uint64_t exporter_start, vmm_phys exporter_value,
			    double deadline, int *fd, vmm_error *err);

#endif
