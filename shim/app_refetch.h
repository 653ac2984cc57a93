/* The importer's side of re-sharing the program's own VMM memory after a group sleep
 * (app_refetch.c): ask the exporting process for a new descriptor of its handle. The app
 * registry calls it at wake (vmm_app_set_refetch). */
#ifndef VMMSHIM_APP_REFETCH_H
#define VMMSHIM_APP_REFETCH_H

#include <sys/types.h>

#include "../core/backend/backend.h"
#include "../core/vmm_error.h"

vmm_status shim_app_refetch(pid_t exporter, vmm_phys exporter_value, double deadline, int *fd,
			    vmm_error *err);

#endif
