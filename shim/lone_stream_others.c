/* The table of other streams (lone_stream_others.h). */
#include "lone_stream_others.h"

#include <stddef.h>

#include "hooks_common.h"

DRIVER_EXTRA_SLOT(cuCtxPushCurrent_v2);
DRIVER_EXTRA_SLOT(cuCtxPopCurrent_v2);
DRIVER_EXTRA_SLOT(cuEventCreate);
DRIVER_EXTRA_SLOT(cuEventRecord);
DRIVER_EXTRA_SLOT(cuEventQuery);
DRIVER_EXTRA_SLOT(cuStreamGetCtx);
DRIVER_EXTRA_SLOT(cuStreamSynchronize);

struct other {
	struct stream_name s;  /* s.key == 0: a free slot */
	CUevent ev;            /* recorded after all its work but what `dirty` says; NULL: none */
	bool dirty;            /* work queued since ev was recorded (or no ev yet) */
	int inflight;          /* submissions on their way into the driver */
	bool gone;             /* destroyed: no submission matches it any more */
};

static struct other others[OTHERS_MAX];
/* Bumped by others_clear: a token names its slot and the generation it was given in. */
static unsigned generation;

#define TOKEN_GENERATIONS (1u << 20)

static struct other *find(uintptr_t key)
{
	for (int i = 0; i < OTHERS_MAX; i++)
		if (others[i].s.key == key && !others[i].gone)
			return &others[i];
	return NULL;
}

bool stream_name_context(struct stream_name *s)
{
	if (s->ctx)
		return true;
	return DRIVER_EXTRA(cuStreamGetCtx) &&
	       DRIVER_EXTRA(cuStreamGetCtx)(s->h, &s->ctx) == CUDA_SUCCESS && s->ctx;
}

/* Make s's context current on this thread (a legacy stream, and an event, belong to one); undo
 * with leave() when it returns true. */
static bool enter(const struct stream_name *s)
{
	return DRIVER_EXTRA(cuCtxPushCurrent_v2) && DRIVER_EXTRA(cuCtxPopCurrent_v2) &&
	       DRIVER_EXTRA(cuCtxPushCurrent_v2)(s->ctx) == CUDA_SUCCESS;
}

static void leave(void)
{
	CUcontext popped;

	DRIVER_EXTRA(cuCtxPopCurrent_v2)(&popped);
}

bool stream_name_record(const struct stream_name *s, CUevent *ev)
{
	bool ok = false;

	if (!DRIVER_EXTRA(cuEventCreate) || !DRIVER_EXTRA(cuEventRecord) || !enter(s))
		return false;
	if (*ev || DRIVER_EXTRA(cuEventCreate)(ev, CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS)
		ok = DRIVER_EXTRA(cuEventRecord)(*ev, s->h) == CUDA_SUCCESS;
	leave();
	return ok;
}

CUresult stream_name_sync(const struct stream_name *s)
{
	CUresult r;

	if (!DRIVER_EXTRA(cuStreamSynchronize) || !enter(s))
		return CUDA_ERROR_NOT_FOUND;
	r = DRIVER_EXTRA(cuStreamSynchronize)(s->h);
	leave();
	return r;
}

static struct other *add(struct stream_name *s)
{
	struct other *o = find(s->key);

	if (o) {
		s->ctx = o->s.ctx;
		return o;
	}
	if (!stream_name_context(s))
		return NULL;
	for (int i = 0; i < OTHERS_MAX; i++) {
		if (!others[i].s.key) {
			others[i] = (struct other){ .s = *s, .dirty = true };
			return &others[i];
		}
	}
	return NULL;
}

int others_submitting(struct stream_name *s)
{
	struct other *o = add(s);

	if (!o)
		return -1;
	o->inflight++;
	return (int)((generation % TOKEN_GENERATIONS) * OTHERS_MAX + (unsigned)(o - others));
}

void others_submitted(int token)
{
	struct other *o = &others[token % OTHERS_MAX];

	if ((unsigned)token / OTHERS_MAX != generation % TOKEN_GENERATIONS || !o->inflight)
		return;
	o->inflight--;
	o->dirty = true;
}

static void record(struct other *o);

bool others_note(const struct stream_name *s)
{
	struct stream_name n = *s;
	struct other *o = add(&n);

	if (!o)
		return false;
	record(o);
	return true;
}

/* Record o's event after its work so far. */
static void record(struct other *o)
{
	if (stream_name_record(&o->s, &o->ev))
		o->dirty = false;
}

void others_forget(CUstream h)
{
	for (int i = 0; i < OTHERS_MAX; i++) {
		struct other *o = &others[i];

		if (o->s.key && !o->gone && o->s.h == h) {
			if (o->dirty && !o->inflight)
				record(o);
			o->gone = true;
		}
	}
}

bool others_idle_except(uintptr_t key)
{
	bool idle = true;

	for (int i = 0; i < OTHERS_MAX; i++) {
		struct other *o = &others[i];

		if (!o->s.key || (o->s.key == key && !o->gone))
			continue;
		if (o->inflight) {
			idle = false;
		} else if (o->dirty) {
			record(o);
			idle = false;
		} else if (!DRIVER_EXTRA(cuEventQuery) ||
			   DRIVER_EXTRA(cuEventQuery)(o->ev) != CUDA_SUCCESS) {
			idle = false;
		}
	}
	return idle;
}

/* The events are left alive (one per slot and episode, lone_stream.c bounds episodes):
 * destroying one would need to know no query is about to use it. */
void others_clear(void)
{
	for (int i = 0; i < OTHERS_MAX; i++)
		others[i] = (struct other){ 0 };
	generation++;
}
