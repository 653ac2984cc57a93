/* Kept exports (heap_keep.h): one singly linked list per device heap, short in practice (one
 * record per allocation handed to another process), and a count of kept descriptors per core for
 * the budget. */
#include "heap_keep.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "log.h"

/* Every heap's list changes only under this lock as well as the heap's, and a fork waits for it
 * (fork_prepare), so that a forked child finds each list whole. A leaf: held for a few pointer
 * stores, never across a call, unlike the heap's lock (held across driver calls, which a fork
 * must not wait behind nor take in an order the driver's own fork handlers may not expect). */
static pthread_mutex_t list_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

static void fork_prepare(void)
{
	pthread_mutex_lock(&list_lock);
}

static void fork_parent(void)
{
	pthread_mutex_unlock(&list_lock);
}

static void fork_child(void)
{
	/* The one thread left took it in fork_prepare. */
	pthread_mutex_unlock(&list_lock);
}

static void fork_handlers(void)
{
	if (pthread_atfork(fork_prepare, fork_parent, fork_child))
		vmm_log(VMM_LOG_WARN, "kept exports: no fork handlers; a child forked while "
			"another thread changes them may keep some open");
}

size_t keep_budget(void)
{
	struct rlimit rl;
	size_t n = VMM_SHARE_KEEP_MAX;

	/* A program near its descriptor limit must not find the shim holding them. */
	if (!getrlimit(RLIMIT_NOFILE, &rl) && rl.rlim_cur != RLIM_INFINITY &&
	    rl.rlim_cur / 8 < n)
		n = (size_t)(rl.rlim_cur / 8);
	return n;
}

struct kept_export *keep_find(struct devheap *dh, uint64_t id)
{
	for (struct kept_export *k = dh->kept; k; k = k->next)
		if (k->id == id)
			return k;
	return NULL;
}

bool keep_store(struct devheap *dh, uint64_t id, vmm_devptr span, size_t span_size,
		const vmm_share_piece *pieces, size_t n)
{
	struct vmm_core *core = dh->core;
	struct kept_export *k;
	size_t before;

	if (!n || keep_find(dh, id))
		return false;
	before = atomic_fetch_add(&core->kept_fds, n);
	if (before + n > keep_budget()) {
		atomic_fetch_sub(&core->kept_fds, n);
		return false;
	}
	k = malloc(sizeof(*k) + n * sizeof(k->pieces[0]));
	if (!k) {
		atomic_fetch_sub(&core->kept_fds, n);
		return false;
	}
	k->id = id;
	k->span = span;
	k->span_size = span_size;
	k->n = n;
	memcpy(k->pieces, pieces, n * sizeof(*pieces));
	/* Kept for the process's life: a program it execs must not inherit them. */
	for (size_t i = 0; i < n; i++)
		fcntl(k->pieces[i].fd, F_SETFD, FD_CLOEXEC);
	/* Registered before the first record, so that no child ever sees a list being linked. */
	pthread_once(&fork_once, fork_handlers);
	pthread_mutex_lock(&list_lock);
	k->next = dh->kept;
	dh->kept = k;
	pthread_mutex_unlock(&list_lock);
	return true;
}

vmm_status keep_dup(const struct kept_export *k, vmm_share_piece *out, size_t max,
		    vmm_error *err)
{
	size_t i;

	if (k->n > max)
		return vmm_fail(err, VMM_E_UNSUPPORTED, 0, "more than %zu pieces", max);
	for (i = 0; i < k->n; i++) {
		out[i] = k->pieces[i];
		out[i].fd = fcntl(k->pieces[i].fd, F_DUPFD_CLOEXEC, 0);
		if (out[i].fd < 0)
			break;
	}
	if (i == k->n)
		return VMM_OK;
	{
		int e = errno;

		while (i-- > 0)
			close(out[i].fd);
		return vmm_fail(err, VMM_E_HOST_OOM, e, "cannot duplicate a kept descriptor: %s",
				strerror(e));
	}
}

/* Move the records of dh's list that match into a detached list. */
static struct kept_export *detach_if(struct devheap *dh,
				     bool (*match)(const struct kept_export *k, const void *arg),
				     const void *arg)
{
	struct kept_export **pp = &dh->kept, *out = NULL;

	pthread_mutex_lock(&list_lock);
	while (*pp) {
		struct kept_export *k = *pp;

		if (!match(k, arg)) {
			pp = &k->next;
			continue;
		}
		*pp = k->next;
		k->next = out;
		out = k;
	}
	pthread_mutex_unlock(&list_lock);
	return out;
}

static bool has_id(const struct kept_export *k, const void *arg)
{
	return k->id == *(const uint64_t *)arg;
}

struct range {
	vmm_devptr va;
	size_t size;
};

static bool meets(const struct kept_export *k, const void *arg)
{
	const struct range *r = arg;

	return k->span < r->va + r->size && r->va < k->span + k->span_size;
}

static bool any(const struct kept_export *k, const void *arg)
{
	(void)k;
	(void)arg;
	return true;
}

struct kept_export *keep_detach_id(struct devheap *dh, uint64_t id)
{
	return dh->kept ? detach_if(dh, has_id, &id) : NULL;
}

struct kept_export *keep_detach_range(struct devheap *dh, vmm_devptr va, size_t size)
{
	struct range r = { va, size };

	return dh->kept ? detach_if(dh, meets, &r) : NULL;
}

struct kept_export *keep_detach_all(struct devheap *dh)
{
	return dh->kept ? detach_if(dh, any, NULL) : NULL;
}

void keep_close(struct vmm_core *core, struct kept_export *list)
{
	while (list) {
		struct kept_export *next = list->next;

		for (size_t i = 0; i < list->n; i++)
			close(list->pieces[i].fd);
		atomic_fetch_sub(&core->kept_fds, list->n);
		free(list);
		list = next;
	}
}

void keep_after_fork(struct devheap *dh)
{
	/* No lock: the child's one thread forked while holding list_lock (fork_prepare), so no
	 * list was mid-change; whether fork_child has released it yet depends on the order the
	 * handlers were registered in. */
	struct kept_export *list = dh->kept;

	dh->kept = NULL;
	keep_close(dh->core, list);
	/* Records being stored at the fork counted themselves before linking: none is the
	 * child's. */
	atomic_store(&dh->core->kept_fds, 0);
}
