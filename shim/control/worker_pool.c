/* The control server's pool of answering threads (worker_pool.h). Jobs wait in a FIFO only when a
 * thread is there to take them: a job is queued and a waiting thread signalled, or a new thread
 * is started for it. */
#include "worker_pool.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../core/lib_thread.h"
#include "../../core/log.h"
#include "../../core/mono_wait.h"

/* A thread's stack: the orchestration and the driver calls it makes need little; a small stack
 * keeps the server usable when address space is short. Sanitizers need more. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define POOL_STACK (4u << 20)
#else
#define POOL_STACK (512u << 10)
#endif

struct job {
	void (*fn)(void *);
	void *arg;
	struct job *next;
	bool answered; /* pool_answered was called (lock held to change it) */
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
/* Both on CLOCK_MONOTONIC (cond_init): the waits have deadlines. */
static pthread_cond_t work = PTHREAD_COND_INITIALIZER;  /* a job was queued, or stopping */
static pthread_cond_t done = PTHREAD_COND_INITIALIZER;  /* a job finished */
static pthread_once_t cond_once = PTHREAD_ONCE_INIT;
static struct job *head, *tail;
static int queued;   /* jobs in the FIFO */
static int busy;     /* jobs submitted and not finished (queued ones included) */
static int unanswered; /* of those, the ones whose answer is not out yet (admission) */
static int waiting;  /* threads waiting for a job */
static int threads;  /* threads alive */
static bool stopping;
static __thread struct job *current; /* the job this pool thread is running */

static void cond_init(void)
{
	vmm_cond_init_monotonic(&work);
	vmm_cond_init_monotonic(&done);
}

/* The oldest queued job, or NULL (lock held). */
static struct job *pop_locked(void)
{
	struct job *j = head;

	if (j) {
		head = j->next;
		if (!head)
			tail = NULL;
		queued--;
	}
	return j;
}

static void *pool_main(void *unused)
{
	(void)unused;
	pthread_mutex_lock(&lock);
	for (;;) {
		struct timespec until;
		struct job *j;

		vmm_deadline_ms(&until, POOL_IDLE_MS);
		while (!head && !stopping) {
			int rc;

			waiting++;
			rc = pthread_cond_timedwait(&work, &lock, &until);
			waiting--;
			if (rc == ETIMEDOUT && !head)
				break;
		}
		j = pop_locked();
		if (!j)
			break; /* waited long enough, or the process is exiting */
		pthread_mutex_unlock(&lock);
		current = j;
		j->fn(j->arg);
		current = NULL;
		pthread_mutex_lock(&lock);
		if (!j->answered)
			unanswered--;
		busy--;
		free(j);
		pthread_cond_broadcast(&done);
	}
	threads--;
	pthread_mutex_unlock(&lock);
	return NULL;
}

/* Start one more thread (lock held). */
static int start_thread_locked(void)
{
	pthread_attr_t attr;
	pthread_t t;
	int rc;

	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&attr, POOL_STACK);
	rc = vmm_thread_create(&t, &attr, pool_main, NULL);
	pthread_attr_destroy(&attr);
	if (!rc) {
		threads++;
		pthread_setname_np(t, "vmmshim-ans");
	}
	return rc;
}

bool pool_submit(void (*fn)(void *arg), void *arg, char *why, size_t whylen)
{
	struct job *j = malloc(sizeof(*j));
	int rc = 0;

	if (!j) {
		snprintf(why, whylen, "out of memory");
		return false;
	}
	*j = (struct job){ .fn = fn, .arg = arg };
	pthread_once(&cond_once, cond_init);
	pthread_mutex_lock(&lock);
	if (stopping || unanswered >= POOL_MAX_BUSY || busy >= POOL_MAX_JOBS) {
		bool answering = unanswered >= POOL_MAX_BUSY;

		pthread_mutex_unlock(&lock);
		free(j);
		if (stopping)
			snprintf(why, whylen, "the process is exiting");
		else if (answering)
			snprintf(why, whylen, "%d requests are being answered already; try again",
				 POOL_MAX_BUSY);
		else
			snprintf(why, whylen, "%d answered requests are still closing; try again",
				 POOL_MAX_JOBS - POOL_MAX_BUSY);
		return false;
	}
	/* A waiting thread takes it, unless the queued jobs claim every waiting thread. */
	if (waiting <= queued)
		rc = start_thread_locked();
	if (rc) {
		pthread_mutex_unlock(&lock);
		free(j);
		snprintf(why, whylen, "cannot start a thread to answer: %s", strerror(rc));
		vmm_log(VMM_LOG_WARN, "control: %s", why);
		return false;
	}
	if (tail)
		tail->next = j;
	else
		head = j;
	tail = j;
	queued++;
	busy++;
	unanswered++;
	pthread_cond_signal(&work);
	pthread_mutex_unlock(&lock);
	return true;
}

void pool_answered(void)
{
	struct job *j = current;

	if (!j || j->answered)
		return;
	pthread_mutex_lock(&lock);
	j->answered = true;
	unanswered--;
	pthread_mutex_unlock(&lock);
}

int pool_stop(int wait_ms)
{
	struct timespec until;
	int left;

	pthread_once(&cond_once, cond_init);
	vmm_deadline_ms(&until, wait_ms);
	pthread_mutex_lock(&lock);
	stopping = true;
	pthread_cond_broadcast(&work);
	while (busy > 0)
		if (pthread_cond_timedwait(&done, &lock, &until))
			break;
	left = busy;
	pthread_mutex_unlock(&lock);
	return left;
}

bool pool_stopping(void)
{
	bool s;

	pthread_mutex_lock(&lock);
	s = stopping;
	pthread_mutex_unlock(&lock);
	return s;
}

int pool_threads(void)
{
	int n;

	pthread_mutex_lock(&lock);
	n = threads;
	pthread_mutex_unlock(&lock);
	return n;
}

void pool_after_fork(void)
{
	/* Queued jobs were the parent's requests: their connections are not ours to answer. */
	pthread_mutex_init(&lock, NULL);
	pthread_once(&cond_once, cond_init);
	cond_init();
	head = tail = NULL;
	queued = busy = unanswered = waiting = threads = 0;
	stopping = false;
}
