/* Which call each thread inside the gate is in (gate_who.h). A fixed table of slots, one per
 * live thread that has entered the gate; past its size a thread shares one spare slot that is
 * never listed (the count in the message stays right, the name is left out). */
#include "gate_who.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#define GATE_WHO_SLOTS 256

struct slot {
	_Atomic(const char *) what; /* the call the thread is inside; NULL: none */
	atomic_bool used;           /* owned by a live thread */
};

static struct slot slots[GATE_WHO_SLOTS];
static struct slot spare;
static _Thread_local struct slot *mine;
static pthread_key_t slot_key;
static bool have_key;
static pthread_once_t key_once = PTHREAD_ONCE_INIT;

/* A thread that ends gives its slot back (a thread cannot end inside a device call). */
static void give_back(void *p)
{
	struct slot *s = p;

	atomic_store_explicit(&s->what, NULL, memory_order_relaxed);
	atomic_store(&s->used, false);
}

static void make_key(void)
{
	have_key = pthread_key_create(&slot_key, give_back) == 0;
}

/* Once per thread: claim a free slot, or the spare when none is free or the thread's end could
 * not be noticed (no key: a slot would never come back). */
static struct slot *claim(void)
{
	pthread_once(&key_once, make_key);
	if (!have_key)
		return &spare;
	for (int i = 0; i < GATE_WHO_SLOTS; i++) {
		bool want = false;

		if (!atomic_load_explicit(&slots[i].used, memory_order_relaxed) &&
		    atomic_compare_exchange_strong(&slots[i].used, &want, true)) {
			if (pthread_setspecific(slot_key, &slots[i])) {
				atomic_store(&slots[i].used, false);
				return &spare;
			}
			return &slots[i];
		}
	}
	return &spare;
}

void gate_who_set(const char *what)
{
	if (!mine)
		mine = claim();
	atomic_store_explicit(&mine->what, what, memory_order_relaxed);
}

void gate_who_list(char *buf, size_t cap)
{
	size_t len = 0;

	if (!cap)
		return;
	buf[0] = '\0';
	for (int i = 0; i < GATE_WHO_SLOTS; i++) {
		const char *w = atomic_load_explicit(&slots[i].what, memory_order_relaxed);
		bool seen = false;
		int n;

		if (!w || &slots[i] == mine) /* a closer inside the gate itself is not waited for */
			continue;
		for (int j = 0; j < i && !seen; j++) /* each name once */
			seen = atomic_load_explicit(&slots[j].what, memory_order_relaxed) == w;
		if (seen)
			continue;
		n = snprintf(buf + len, cap - len, "%s%s", len ? ", " : "", w);
		if (n < 0 || (size_t)n >= cap - len) {
			if (cap > 4)
				memcpy(buf + cap - 4, "...", 4);
			return;
		}
		len += (size_t)n;
	}
}

void gate_who_after_fork(void)
{
	for (int i = 0; i < GATE_WHO_SLOTS; i++) {
		if (&slots[i] == mine)
			continue;
		atomic_store_explicit(&slots[i].what, NULL, memory_order_relaxed);
		atomic_store(&slots[i].used, false);
	}
}
