/* The library's own threads (lib_thread.h). */
#include "lib_thread.h"

#include <signal.h>

#include "mono_wait.h"

int vmm_thread_create(pthread_t *th, const pthread_attr_t *attr, void *(*fn)(void *), void *arg)
{
	sigset_t all, old;
	int rc;

	/* The new thread inherits the mask in force when it is created. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	rc = pthread_create(th, attr, fn, arg);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return rc;
}

bool vmm_worker_start(struct vmm_worker *w, void *(*fn)(void *), void *arg, const char *name)
{
	pthread_t th;

	pthread_mutex_init(&w->lock, NULL);
	pthread_cond_init(&w->posted, NULL);
	vmm_cond_init_monotonic(&w->exited);
	w->stop = w->gone = false;
	if (vmm_thread_create(&th, NULL, fn, arg)) {
		pthread_mutex_destroy(&w->lock);
		pthread_cond_destroy(&w->posted);
		pthread_cond_destroy(&w->exited);
		return false;
	}
	pthread_detach(th);
	pthread_setname_np(th, name);
	return true;
}

void vmm_worker_exiting(struct vmm_worker *w)
{
	w->gone = true;
	pthread_cond_broadcast(&w->exited);
}

bool vmm_worker_stop(struct vmm_worker *w, int ms)
{
	struct timespec deadline;
	bool gone;

	vmm_deadline_ms(&deadline, ms);
	pthread_mutex_lock(&w->lock);
	w->stop = true;
	pthread_cond_signal(&w->posted);
	while (!w->gone)
		if (pthread_cond_timedwait(&w->exited, &w->lock, &deadline))
			break;
	gone = w->gone;
	pthread_mutex_unlock(&w->lock);
	if (gone) {
		pthread_mutex_destroy(&w->lock);
		pthread_cond_destroy(&w->posted);
		pthread_cond_destroy(&w->exited);
	}
	return gone;
}
