/* The control server's answering threads (worker_pool.c): at most POOL_MAX_BUSY requests are
 * answered at once, each on a thread of the pool. A thread that has answered waits a while for
 * the next request instead of ending, so that a request in a steady stream (legacy IPC opens of
 * one tensor after another) is handed to a waiting thread, not to a new one: creating and ending
 * a thread per request cost more than the rest of the request in a large program. */
#ifndef VMMSHIM_WORKER_POOL_H
#define VMMSHIM_WORKER_POOL_H

#include <stdbool.h>
#include <stddef.h>

#define POOL_MAX_BUSY 16        /* requests being answered (or about to be) at once */
#define POOL_IDLE_MS 10000      /* how long a thread waits for the next request before ending */

/* Run fn(arg) on a thread of the pool. false (fn not run, arg still the caller's) when
 * POOL_MAX_BUSY requests are being answered already or no thread can be had; why says which.
 * New threads block every signal and have a small stack. */
bool pool_submit(void (*fn)(void *arg), void *arg, char *why, size_t whylen);

/* At exit: from now on pool_stopping() is true and waiting threads end; wait at most wait_ms for
 * the requests being answered. Returns how many are still being answered. */
int pool_stop(int wait_ms);
bool pool_stopping(void);

/* Threads alive (waiting or answering), for tests and the log. */
int pool_threads(void);

/* In a forked child: the parent's threads are gone; start from nothing. */
void pool_after_fork(void);

#endif
