/* The library's own threads (lib_thread.h). */
#include "lib_thread.h"

#include <signal.h>

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
