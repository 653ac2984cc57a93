/* This process's membership of its GPUs' member tables (share_members.c): joined at its first
 * served allocation on a device (share_join_gpu), left at exit, none in a forked child until it
 * allocates. A table that cannot be had is said once; rounds on that GPU then ask every process of
 * the control folder instead (share_room.c). */
#include "share_internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#include "../../core/log.h"
#include "../protocol/proc_start.h"

static struct share_per_gpu tables = SHARE_PER_GPU_INIT;
static atomic_bool joined[VMM_MAX_DEVICES];
static atomic_ullong my_start; /* this process's start time (0: not read yet) */

static void *table_open(const char *dir, const char *uuid)
{
	return share_members_open(dir, uuid);
}

struct share_members *share_members_of(int dev)
{
	return share_per_gpu(&tables, dev, share_settings_get()->run_dir, table_open);
}

static uint64_t start_of_self(void)
{
	uint64_t s = atomic_load(&my_start);

	if (!s) {
		s = proc_start_time(getpid());
		atomic_store(&my_start, s);
	}
	return s;
}

void share_join_gpu(int dev)
{
	struct share_members *m;
	char uuid[SHARE_UUID_MAX];

	if (dev < 0 || dev >= VMM_MAX_DEVICES ||
	    atomic_load_explicit(&joined[dev], memory_order_relaxed) || !share_enabled())
		return;
	if (!share_gpu_uuid(dev, uuid, sizeof(uuid)))
		return; /* the driver does not say yet: asked again at the next allocation */
	/* The GPU's event too: from the first allocation on, this process's frees wake waiters. */
	share_event_of(dev);
	m = share_members_of(dev);
	if (atomic_exchange(&joined[dev], true))
		return; /* another thread joined meanwhile */
	if (!m)
		vmm_log(VMM_LOG_WARN, "share: cannot map the member table of %s in %s: rounds "
			"there ask every process of the folder", uuid,
			share_settings_get()->run_dir);
	else if (!share_members_join(m, getpid(), start_of_self()))
		vmm_log(VMM_LOG_WARN, "share: the member table of %s holds %d live processes: "
			"the others' rounds do not ask this one for room", uuid,
			SHARE_MEMBER_SLOTS);
}

void share_members_exit(void)
{
	for (int d = 0; d < VMM_MAX_DEVICES; d++) {
		struct share_members *m = atomic_load(&tables.by_dev[d]);

		if (m && atomic_load(&joined[d]))
			share_members_leave(m, getpid());
	}
}

void share_members_after_fork(void)
{
	/* The child is another process: it joins at its own first allocation. */
	atomic_store(&my_start, 0);
	for (int d = 0; d < VMM_MAX_DEVICES; d++)
		atomic_store(&joined[d], false);
}
