/* What the shim's own files share and nobody else uses. */
#ifndef VMMSHIM_INTERNAL_H
#define VMMSHIM_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime.h"

enum shim_pass_kind {
	PASS_DEVICE,
	PASS_DEVICE_FREE,
	PASS_MANAGED,
	PASS_HOST,
	PASS_ARRAY,
	PASS_ACL,
	PASS_ACL_FREE,
};

/* Count an allocation (or free) the shim left to the driver. */
void shim_count_passthrough(enum shim_pass_kind kind, size_t bytes);

/* The child of a fork: the runtime belongs to the parent (its device state does not carry over), so
 * the child's hooks pass everything through. */
bool shim_in_forked_child(void);

/* gate.c: make the gate usable in a fork child (one thread, nothing inside). */
void gate_reset_after_fork(void);

/* hooks_acl.c: routing of ACL entry points found with dlsym. */
bool shim_acl_wraps_name(const char *name);
void *shim_acl_wrapper_for(const char *name, void *real_fn);

#endif
