/* status's `app_share` records: the program's own VMM handles that it exported as, or imported
 * from, a POSIX descriptor, with the shim's duplicates of those descriptors (their numbers in this
 * process, for vmmctl's kcmp) and whether the program itself still holds one open. vmmctl uses
 * them to tell, in a group sleep, who holds each shared memory and why it stays resident. */
#include <stdio.h>

#include "control_internal.h"

/* Listed in one reply (app_shares gives the total): more than one member's sleep request can
 * name (about 58 imports), so that vmmctl sees every handle it has to leave out. */
#define SHARE_RECORDS 128

void control_put_app_shares(proto_writer *w, vmm_app_registry *reg)
{
	vmm_app_share sh[SHARE_RECORDS];
	size_t n = vmm_app_share_list(reg, sh, SHARE_RECORDS);

	for (size_t i = 0; i < n && i < SHARE_RECORDS; i++) {
		char fds[VMM_APP_SHARE_FDS * 12] = "";
		size_t len = 0;

		for (unsigned k = 0; k < sh[i].nfds && k < VMM_APP_SHARE_FDS; k++)
			len += (size_t)snprintf(fds + len, sizeof(fds) - len, "%s%d", k ? "," : "",
						sh[i].fds[k]);
		proto_record_begin(w, "app_share");
		proto_put_int(w, "dev", sh[i].dev);
		proto_put_u64(w, "handle", sh[i].app);
		proto_put_u64(w, "size", sh[i].size);
		proto_put_str(w, "role", sh[i].imported ? "import" : "export");
		proto_put_str(w, "fds", fds);
		proto_put_int(w, "program_fds", sh[i].program_fds);
		proto_put_int(w, "program_fd", sh[i].program_fd);
		proto_put_int(w, "kcmp_errno", sh[i].kcmp_errno);
		proto_put_bool(w, "released", sh[i].released);
		proto_record_end(w);
	}
	if (n) {
		proto_record_begin(w, "app_shares");
		proto_put_u64(w, "count", n);
		proto_record_end(w);
	}
}
