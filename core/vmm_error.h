/* Errors are values: every core call that can fail returns a vmm_status and, when given a
 * vmm_error, fills it with a message a user can act on. Nothing in core/ aborts. */
#ifndef VMM_ERROR_H
#define VMM_ERROR_H

#include <stdarg.h>

typedef enum vmm_status {
	VMM_OK = 0,
	VMM_E_INVALID,     /* bad argument; nothing changed */
	VMM_E_OOM,         /* the device is out of memory */
	VMM_E_HOST_OOM,    /* host memory (for a backup) could not be had */
	VMM_E_NOT_OURS,    /* the pointer was not allocated by the core */
	VMM_E_DRIVER,      /* the device driver failed; driver_code says how */
	VMM_E_ALREADY,     /* already asleep / already awake */
	VMM_E_BUSY,        /* a state change is in progress, or a wait timed out */
	VMM_E_UNSUPPORTED, /* the backend cannot do this */
} vmm_status;

typedef struct vmm_error {
	vmm_status status;
	int driver_code;   /* CUresult / aclError when status == VMM_E_DRIVER or VMM_E_OOM */
	char msg[256];
} vmm_error;

const char *vmm_status_name(vmm_status s);

/* Fills e (when not NULL) and returns s, so that callers can write `return vmm_fail(e, ...)`. */
vmm_status vmm_fail(vmm_error *e, vmm_status s, int driver_code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static inline void vmm_error_clear(vmm_error *e)
{
	if (e) {
		e->status = VMM_OK;
		e->driver_code = 0;
		e->msg[0] = '\0';
	}
}

#endif
