/* The contexts a program made itself (cuCtxCreate, aclrtCreateContext). No driver call lists a
 * process's contexts, and synchronizing one context leaves the others running, so the shim
 * reports each context as it is created and destroyed, and a backend's synchronize drains every
 * listed context of the device.
 *
 * Lifetime: a backend call that uses a listed context holds it (ctx_list_each); a destroy first
 * waits until nobody holds it, keeps it listed as "closing" while the driver destroys it, and
 * unlists it afterwards. A synchronization that meets a closing context waits for that destroy to
 * end instead of touching the context: once destroyed, a context has no work left. So no driver
 * call ever names a destroyed context, and no context's work escapes a synchronization. */
#ifndef VMM_BACKEND_CONTEXTS_H
#define VMM_BACKEND_CONTEXTS_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "../vmm_error.h"
#include "backend.h"

struct ctx_entry;

typedef struct ctx_list {
	pthread_mutex_t lock;
	pthread_cond_t changed; /* a context was released by its user, or unlisted */
	struct ctx_entry *head;
	uint64_t next_seq;
} ctx_list;

#define CTX_LIST_INIT { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL, 1 }

/* List ctx on device dev (listed already: its device is updated). -1 when host memory is out. */
int ctx_list_add(ctx_list *l, void *ctx, int dev);

/* Before the driver destroys ctx: wait until no backend call holds it, then mark it closing.
 * Returns whether it was listed (*dev: its device). */
bool ctx_list_close_begin(ctx_list *l, void *ctx, int *dev);
/* After the driver's destroy: unlist ctx (destroyed), or list it as usable again (the destroy
 * failed and the context lives on). */
void ctx_list_close_end(ctx_list *l, void *ctx, bool destroyed);

/* Call fn(ctx, arg, err) for each listed context of dev, holding it during the call; a closing
 * one is waited for (its destroy ends its work) and skipped. Contexts listed meanwhile are visited
 * too. Stops at the first failure and returns it. */
typedef vmm_status (*ctx_list_fn)(void *ctx, void *arg, vmm_error *err);
vmm_status ctx_list_each(ctx_list *l, int dev, ctx_list_fn fn, void *arg, vmm_error *err);

/* Is ctx listed (closing or not)? */
bool ctx_list_has(ctx_list *l, void *ctx);

/* How many contexts are listed on dev (dev < 0: on every device). */
int ctx_list_count(ctx_list *l, int dev);

/* The process-wide list of the program's contexts of one kind of driver (backend.h's
 * vmm_context_* fill it; that kind's backend drains it). */
ctx_list *vmm_program_contexts(vmm_ctx_kind kind);

#endif
