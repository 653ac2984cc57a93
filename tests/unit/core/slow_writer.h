/* A simdev kernel for the tests that need device work still running: it fills [ptr, ptr+size)
 * with `value` in 16 slices over `ms` milliseconds, checking the device's access before each
 * slice as a GPU would fault (then `fault` is set and the rest is not written). With `hold` it
 * also runs until the test releases it, for a test that must see it still running. Linked only into
 * the tests that link simdev's driver. */
#ifndef VMM_TEST_SLOW_WRITER_H
#define VMM_TEST_SLOW_WRITER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

struct writer {
	void *ptr;
	size_t size;
	int value, ms;
	atomic_bool *hold;    /* if set: the last slice waits until *hold is false (10 s at most) */
	atomic_bool done;
	atomic_int fault;
	struct writer *self;  /* the kernel's one argument ... */
	void *params[1];      /* ... and its parameter array, alive as long as the writer */
};

/* The kernel (launch it with SIMDEV_KERNEL(slow_write) and writer_params(w)). */
void slow_write(void **params);
/* w's parameter array for cuLaunchKernel. */
void **writer_params(struct writer *w);

#endif
