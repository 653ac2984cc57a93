/* The lists of a program's own contexts (contexts.h), one per kind of driver, and the entry points
 * through which the shim reports them (backend.h). Few entries (a program makes a handful of
 * contexts), so a linked list searched under one lock; entries are visited in the order they were
 * listed (seq), which lets a walk drop the lock around each driver call and find its place again. */
#include "contexts.h"

#include <stdlib.h>

struct ctx_entry {
	void *ctx;
	int dev;
	int users;     /* backend calls holding it */
	bool closing;  /* the driver is destroying it */
	uint64_t seq;  /* order of listing */
	struct ctx_entry *next;
};

static struct ctx_entry *find(ctx_list *l, void *ctx)
{
	for (struct ctx_entry *e = l->head; e; e = e->next)
		if (e->ctx == ctx)
			return e;
	return NULL;
}

int ctx_list_add(ctx_list *l, void *ctx, int dev)
{
	struct ctx_entry *e;
	int rc = 0;

	pthread_mutex_lock(&l->lock);
	e = find(l, ctx);
	if (e) {
		/* A handle the driver reuses after a destroy we did not see: the same context now. */
		e->dev = dev;
		e->closing = false;
	} else if ((e = calloc(1, sizeof(*e)))) {
		e->ctx = ctx;
		e->dev = dev;
		e->seq = l->next_seq++;
		e->next = l->head;
		l->head = e;
	} else {
		rc = -1;
	}
	pthread_mutex_unlock(&l->lock);
	return rc;
}

bool ctx_list_close_begin(ctx_list *l, void *ctx, int *dev)
{
	struct ctx_entry *e;

	pthread_mutex_lock(&l->lock);
	/* Another destroy of the same handle (a program bug) waits its turn here. */
	while ((e = find(l, ctx)) && (e->users || e->closing))
		pthread_cond_wait(&l->changed, &l->lock);
	if (e) {
		e->closing = true;
		*dev = e->dev;
	}
	pthread_mutex_unlock(&l->lock);
	return e != NULL;
}

void ctx_list_close_end(ctx_list *l, void *ctx, bool destroyed)
{
	pthread_mutex_lock(&l->lock);
	for (struct ctx_entry **p = &l->head; *p; p = &(*p)->next) {
		struct ctx_entry *e = *p;

		if (e->ctx != ctx || !e->closing)
			continue;
		if (destroyed) {
			*p = e->next;
			free(e);
		} else {
			e->closing = false;
		}
		break;
	}
	pthread_cond_broadcast(&l->changed);
	pthread_mutex_unlock(&l->lock);
}

/* The first entry of dev listed after seq `after` (lowest seq), or NULL. */
static struct ctx_entry *next_after(ctx_list *l, int dev, uint64_t after)
{
	struct ctx_entry *best = NULL;

	for (struct ctx_entry *e = l->head; e; e = e->next)
		if (e->dev == dev && e->seq > after && (!best || e->seq < best->seq))
			best = e;
	return best;
}

vmm_status ctx_list_each(ctx_list *l, int dev, ctx_list_fn fn, void *arg, vmm_error *err)
{
	vmm_status st = VMM_OK;
	uint64_t after = 0;
	struct ctx_entry *e;

	pthread_mutex_lock(&l->lock);
	while (!st && (e = next_after(l, dev, after))) {
		if (e->closing) {
			/* Its destroy is under way: wait for it, then look again from the same place. */
			pthread_cond_wait(&l->changed, &l->lock);
			continue;
		}
		e->users++;
		after = e->seq;
		pthread_mutex_unlock(&l->lock);
		st = fn(e->ctx, arg, err);
		pthread_mutex_lock(&l->lock);
		e->users--; /* still listed: a destroy waits for users to reach 0 */
		pthread_cond_broadcast(&l->changed);
	}
	pthread_mutex_unlock(&l->lock);
	return st;
}

bool ctx_list_has(ctx_list *l, void *ctx)
{
	bool has;

	pthread_mutex_lock(&l->lock);
	has = find(l, ctx) != NULL;
	pthread_mutex_unlock(&l->lock);
	return has;
}

int ctx_list_count(ctx_list *l, int dev)
{
	int n = 0;

	pthread_mutex_lock(&l->lock);
	for (struct ctx_entry *e = l->head; e; e = e->next)
		n += dev < 0 || e->dev == dev;
	pthread_mutex_unlock(&l->lock);
	return n;
}

/* One list per kind of driver, process-wide: the shim reports contexts before any backend opens. */
static ctx_list program_contexts[VMM_CTX_KINDS] = {
	[VMM_CTX_CUDA] = CTX_LIST_INIT,
	[VMM_CTX_ACL] = CTX_LIST_INIT,
};

ctx_list *vmm_program_contexts(vmm_ctx_kind kind)
{
	return &program_contexts[kind];
}

int vmm_context_created(vmm_ctx_kind kind, void *ctx, int dev)
{
	return ctx_list_add(&program_contexts[kind], ctx, dev);
}

void vmm_context_destroy_begin(vmm_ctx_kind kind, void *ctx)
{
	int dev;

	ctx_list_close_begin(&program_contexts[kind], ctx, &dev);
}

void vmm_context_destroy_end(vmm_ctx_kind kind, void *ctx, bool destroyed)
{
	ctx_list_close_end(&program_contexts[kind], ctx, destroyed);
}
