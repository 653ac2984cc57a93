/* app_open: a shimmed process that imported one of our program's exported VMM handles asks for
 * the memory again at its wake, after a group sleep released it everywhere (docs/vmmctl.md, "How
 * a group sleeps"). The handle is named by the program's value; its new descriptor travels with
 * the reply (SCM_RIGHTS), and the registry keeps a duplicate of it, as for the program's own
 * exports, so that a later group sleep matches the two processes again. Same uid only, as for
 * share_open. */
#include <stdio.h>
#include <unistd.h>

#include "../../core/log.h"
#include "../runtime.h"
#include "control_internal.h"

void control_app_open(const proto_request *req, unsigned uid, long pid, proto_writer *w,
		      int *fd)
{
	shim_runtime *rt = shim_runtime_peek();
	vmm_app_registry *reg = rt ? rt->side[SHIM_CUDA].app : NULL;
	uint64_t size = 0;
	vmm_error err;
	char msg[160];

	*fd = -1;
	if (uid != (unsigned)geteuid()) {
		snprintf(msg, sizeof(msg), "uid %u may not map memory of uid %u", uid,
			 (unsigned)geteuid());
		vmm_log(VMM_LOG_WARN, "app_open from pid %ld refused: %s", pid, msg);
		proto_error_response(w, PROTO_ERR_PERMISSION, msg);
		return;
	}
	if (!reg) {
		proto_error_response(w, PROTO_ERR_NOT_READY, "no VMM handles are tracked here");
		return;
	}
	vmm_error_clear(&err);
	if (vmm_app_share_export(reg, (vmm_phys)req->app_handle, fd, &size, &err)) {
		vmm_log(VMM_LOG_INFO, "app_open of handle %#llx from pid %ld: %s",
			(unsigned long long)req->app_handle, pid, err.msg);
		proto_error_response(w, control_error_word(err.status), err.msg);
		*fd = -1;
		return;
	}
	proto_header(w, "ok");
	proto_record_begin(w, "app_open");
	proto_put_u64(w, "handle", req->app_handle);
	proto_put_u64(w, "size", size);
	proto_record_end(w);
	proto_end(w);
	vmm_log(VMM_LOG_DEBUG, "app_open: handle %#llx (%llu bytes) to pid %ld",
		(unsigned long long)req->app_handle, (unsigned long long)size, pid);
}
