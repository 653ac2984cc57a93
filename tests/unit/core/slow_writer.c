/* The slow writing kernel (slow_writer.h). */
#include "slow_writer.h"

#include <string.h>
#include <time.h>

#include "simdev.h"

#define SLICES 16

void slow_write(void **params)
{
	struct writer *w = *(struct writer **)params[0];
	size_t slice = w->size / SLICES;
	long step_ns = (long)w->ms * 1000000 / SLICES;

	for (int i = 0; i < SLICES; i++) {
		char *p = (char *)w->ptr + (size_t)i * slice;

		nanosleep(&(struct timespec){ step_ns / 1000000000, step_ns % 1000000000 }, NULL);
		/* The last slice waits while held (10 s at most). */
		for (int ms = 0; i == SLICES - 1 && w->hold && atomic_load(w->hold) && ms < 10000;
		     ms++)
			nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
		if (simdev_check_access(simdev_current_device(), p, slice)) {
			atomic_store(&w->fault, 1);
			break;
		}
		memset(p, w->value, slice);
	}
	atomic_store(&w->done, true);
}

void **writer_params(struct writer *w)
{
	w->self = w;
	w->params[0] = &w->self;
	return w->params;
}
