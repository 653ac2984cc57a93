/* The library's own threads (the heap's sync-ahead thread, the offload workers, the shim's
 * control and IPC threads) start with every signal blocked: the program's signal handlers must
 * never run on them. */
#ifndef VMM_LIB_THREAD_H
#define VMM_LIB_THREAD_H

#include <pthread.h>

/* pthread_create (attr may be NULL) with every signal blocked in the new thread; the caller's
 * mask is unchanged. Returns pthread_create's result. */
int vmm_thread_create(pthread_t *th, const pthread_attr_t *attr, void *(*fn)(void *), void *arg);

#endif
