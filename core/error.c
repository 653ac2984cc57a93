/* Error values and their names. */
#include "vmm_error.h"

#include <stdio.h>

const char *vmm_status_name(vmm_status s)
{
	switch (s) {
	case VMM_OK: return "ok";
	case VMM_E_INVALID: return "invalid argument";
	case VMM_E_OOM: return "out of device memory";
	case VMM_E_HOST_OOM: return "out of host memory";
	case VMM_E_NOT_OURS: return "not allocated by vmmshim";
	case VMM_E_DRIVER: return "driver error";
	case VMM_E_ALREADY: return "already in that state";
	case VMM_E_BUSY: return "busy";
	case VMM_E_UNSUPPORTED: return "not supported";
	}
	return "unknown error";
}

vmm_status vmm_fail(vmm_error *e, vmm_status s, int driver_code, const char *fmt, ...)
{
	if (e) {
		va_list ap;
		e->status = s;
		e->driver_code = driver_code;
		va_start(ap, fmt);
		vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
		va_end(ap);
	}
	return s;
}
