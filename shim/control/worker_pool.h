/* The control server's answering threads (worker_pool.c): at most POOL_MAX_BUSY requests are
 * answered at once, each on a thread of the pool. A request stops counting once its answer is
 * out (pool_answered), not when its thread is done with the connection: a client asking one
 * request after another would otherwise find its own earlier requests still counted, closing
 * (a drain of up to 200 ms each), and be told to try again. The threads still closing are
 * bounded too (POOL_MAX_JOBS in all). A thread that has answered waits a while for
 * the next request instead of ending, so that a request in a steady stream (legacy IPC opens of
 * one tensor after another) is handed to a waiting thread, not to a new one: creating and ending
 * a thread per request cost more than the rest of the request in a large program. */
#ifndef VMMSHIM_WORKER_POOL_H
#define VMMSHIM_WORKER_POOL_H

#include <stdbool.h>
#include <stddef.h>

#define POOL_MAX_BUSY 16        /* requests being answered (or about to be) at once */
#define POOL_MAX_JOBS 32        /* the same and those answered whose thread is still closing */
#define POOL_IDLE_MS 10000      /* how long a thread waits for the next request before ending */

/* Run fn(arg) on a thread of the pool. false (fn not run, arg still the caller's) when
 * POOL_MAX_BUSY requests are being answered already or no thread can be had; why says which.
 * New threads block every signal and have a small stack. */
bool pool_submit(void (*fn)(void *arg), void *arg, char *why, size_t whylen);

/* Called by a job once its answer is out: the request no longer counts against POOL_MAX_BUSY.
 * Does nothing outside a job of the pool, or when called again. */
void pool_answered(void);

/* At exit: from now on pool_stopping() is true and waiting threads end; wait at most wait_ms for
 * the requests being answered. Returns how many are still being answered. */
int pool_stop(int wait_ms);
bool pool_stopping(void);

/* Threads alive (waiting or answering), for tests and the log. */
int pool_threads(void);

/* In a forked child: the parent's threads are gone; start from nothing. */
void pool_after_fork(void);

#endif
