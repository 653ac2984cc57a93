/* The library's own threads (the heap's sync-ahead thread, the offload workers, the shim's
 * control and IPC threads) start with every signal blocked: the program's signal handlers must
 * never run on them. */
#ifndef VMM_LIB_THREAD_H
#define VMM_LIB_THREAD_H

#include <pthread.h>
#include <stdbool.h>

/* pthread_create (attr may be NULL) with every signal blocked in the new thread; the caller's
 * mask is unchanged. Returns pthread_create's result. */
int vmm_thread_create(pthread_t *th, const pthread_attr_t *attr, void *(*fn)(void *), void *arg);

/* A thread of the core that waits for work (the heap's sync-ahead and refill threads): its lock,
 * the condition work is posted on, and its end. The owner's own state sits beside it, under the
 * same lock. */
struct vmm_worker {
	pthread_mutex_t lock;
	pthread_cond_t posted;  /* work was posted, or stop */
	pthread_cond_t exited;
	bool stop, gone;
};

/* Make w's lock and conditions and start fn(arg) on a detached thread named name (signals
 * blocked). false: no thread, and w is undone. */
bool vmm_worker_start(struct vmm_worker *w, void *(*fn)(void *), void *arg, const char *name);

/* The worker's last step, w's lock held: says it is gone. */
void vmm_worker_exiting(struct vmm_worker *w);

/* Ask the worker to stop and wait for it at most ms: true when it ended (w's lock and conditions
 * are then destroyed); false when it is still busy (in the driver, say), and w must stay. */
bool vmm_worker_stop(struct vmm_worker *w, int ms);

#endif
