/* The thread that exports ahead (ipc_keep.h): a bounded queue under one lock, one thread that
 * blocks every signal (the program's handlers keep running on its own threads). */
#include "ipc_keep.h"

#include <pthread.h>
#include <string.h>

#include "../core/lib_thread.h"
#include "../core/log.h"
#include "../core/mono_wait.h"
#include "../core/vmm_share.h"

struct item {
	vmm_core *core;
	vmm_devptr base;
	uint64_t id;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER;   /* something queued, or stop */
static pthread_cond_t idle;                               /* CLOCK_MONOTONIC: idle_once */
static pthread_once_t idle_once = PTHREAD_ONCE_INIT;
static struct item queue[IPC_KEEP_QUEUE];
static size_t head, count;
static bool started, stopping, busy;

static void idle_init(void)
{
	vmm_cond_init_monotonic(&idle);
}

static void keep_one(const struct item *it)
{
	vmm_error err;
	bool kept = false;

	vmm_error_clear(&err);
	if (vmm_share_keep(it->core, it->base, it->id, &kept, &err))
		/* Freed or asleep meanwhile, or the driver refused: an open exports then. */
		vmm_log(VMM_LOG_DEBUG, "IPC export %llu ahead: %s", (unsigned long long)it->id,
			err.msg);
	else if (!kept)
		vmm_log(VMM_LOG_DEBUG, "IPC export %llu: the descriptor budget is spent; each open "
			"exports", (unsigned long long)it->id);
}

static void *worker_main(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&lock);
	for (;;) {
		struct item it;

		while (!count && !stopping)
			pthread_cond_wait(&wake, &lock);
		if (stopping)
			break;
		it = queue[head];
		head = (head + 1) % IPC_KEEP_QUEUE;
		count--;
		busy = true;
		pthread_mutex_unlock(&lock);
		keep_one(&it);
		pthread_mutex_lock(&lock);
		busy = false;
		pthread_cond_broadcast(&idle);
	}
	pthread_mutex_unlock(&lock);
	return NULL;
}

/* With lock held: start the thread once. false when it cannot be started. */
static bool start_locked(void)
{
	pthread_attr_t attr;
	pthread_t t;
	int rc;

	if (started)
		return true;
	pthread_once(&idle_once, idle_init);
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	rc = vmm_thread_create(&t, &attr, worker_main, NULL);
	pthread_attr_destroy(&attr);
	if (rc) {
		vmm_log(VMM_LOG_WARN, "IPC: cannot start the thread that exports ahead (%s); each "
			"open exports", strerror(rc));
		return false;
	}
	pthread_setname_np(t, "vmmshim-ipc");
	started = true;
	return true;
}

void ipc_keep_queue(vmm_core *core, vmm_devptr base, uint64_t id)
{
	pthread_mutex_lock(&lock);
	for (size_t i = 0; i < count; i++)
		if (queue[(head + i) % IPC_KEEP_QUEUE].id == id) {
			pthread_mutex_unlock(&lock);
			return; /* a second get of the same allocation */
		}
	if (!stopping && count < IPC_KEEP_QUEUE && start_locked()) {
		queue[(head + count) % IPC_KEEP_QUEUE] = (struct item){ core, base, id };
		count++;
		pthread_cond_signal(&wake);
	}
	pthread_mutex_unlock(&lock);
}

bool ipc_keep_shutdown(int wait_ms)
{
	struct timespec ts;
	bool quiet;

	pthread_once(&idle_once, idle_init);
	vmm_deadline_ms(&ts, wait_ms);
	pthread_mutex_lock(&lock);
	stopping = true;
	count = 0;
	pthread_cond_broadcast(&wake);
	while (busy)
		if (pthread_cond_timedwait(&idle, &lock, &ts))
			break;
	quiet = !busy;
	pthread_mutex_unlock(&lock);
	if (!quiet)
		vmm_log(VMM_LOG_WARN, "exit: an IPC export ahead is still running");
	return quiet;
}

void ipc_keep_after_fork(vmm_core *core)
{
	pthread_mutex_init(&lock, NULL);
	pthread_cond_init(&wake, NULL);
	pthread_once(&idle_once, idle_init);
	vmm_cond_init_monotonic(&idle);
	head = count = 0;
	started = stopping = busy = false;
	if (core)
		vmm_share_keep_after_fork(core);
}
