/* survey.h: the sockets asked in parallel by a small pool of threads. */
#include "survey.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli.h"

#define SURVEY_THREADS 32    /* processes asked at once */

struct survey_run {
	survey_item *items;
	int n, next;
	proto_verb verb;
	double timeout;
	pthread_mutex_t lock;
};

static void *worker(void *arg)
{
	struct survey_run *sr = arg;
	proto_request req = { .verb = sr->verb, .device = -1 };

	for (;;) {
		survey_item *it;

		pthread_mutex_lock(&sr->lock);
		it = sr->next < sr->n ? &sr->items[sr->next++] : NULL;
		pthread_mutex_unlock(&sr->lock);
		if (!it)
			return NULL;
		it->rc = client_call(&it->t, &req, sr->timeout, false, true, &it->reply, &it->e);
		if (!it->rc)
			it->rc = client_reply_error(&it->reply, &it->e);
		if (!it->rc && !client_reply_find(&it->reply, "info")) {
			snprintf(it->e.message, sizeof(it->e.message), "pid %ld sent no info",
				 (long)it->t.pid);
			it->rc = EXIT_REPORTED;
		}
	}
}

static int by_pid(const void *x, const void *y)
{
	const survey_item *a = x, *b = y;

	return (a->t.pid > b->t.pid) - (a->t.pid < b->t.pid);
}

int survey_run(proto_verb verb, double timeout, void (*note)(const char *msg, void *arg),
	       void *arg, survey_item **out)
{
	struct survey_run sr = { .verb = verb, .timeout = timeout };
	pthread_t threads[SURVEY_THREADS];
	client_target *targets;
	int n = client_list_sockets(&targets, note, arg), nthreads = 0;

	*out = NULL;
	if (n < 0)
		return -1;
	sr.items = calloc(n ? (size_t)n : 1, sizeof(*sr.items));
	if (!sr.items) {
		free(targets);
		return -1;
	}
	for (int i = 0; i < n; i++)
		sr.items[i].t = targets[i];
	free(targets);
	qsort(sr.items, (size_t)n, sizeof(*sr.items), by_pid);
	sr.n = n;
	pthread_mutex_init(&sr.lock, NULL);
	for (int i = 0; i < SURVEY_THREADS && i < n; i++)
		if (!pthread_create(&threads[nthreads], NULL, worker, &sr))
			nthreads++;
	if (!nthreads)
		worker(&sr);
	for (int i = 0; i < nthreads; i++)
		pthread_join(threads[i], NULL);
	pthread_mutex_destroy(&sr.lock);
	*out = sr.items;
	return n;
}

void survey_free(survey_item *items, int n)
{
	for (int i = 0; items && i < n; i++)
		client_reply_free(&items[i].reply);
	free(items);
}
