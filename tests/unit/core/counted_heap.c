/* The heap over simdev with simdev's submission count (counted_heap.h). */
#include "counted_heap.h"

#include <criterion/criterion.h>

#include "backend/backend.h"
#include "simdev.h"

static uint64_t simdev_count(vmm_backend *be)
{
	(void)be;
	return simdev_submissions();
}

CUstream t_open_counted(struct tctx *t, const vmm_config *cfg)
{
	CUcontext c;
	CUstream s;

	t_open(t, cfg);
	t->be->submitted = simdev_count;
	cr_assert_eq(cuDevicePrimaryCtxRetain(&c, 0), CUDA_SUCCESS);
	cr_assert_eq(cuCtxSetCurrent(c), CUDA_SUCCESS);
	cr_assert_eq(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
	return s;
}

void t_launch_writer(CUstream s, struct writer *w)
{
	cr_assert_eq(cuLaunchKernel(SIMDEV_KERNEL(slow_write), 1, 1, 1, 1, 1, 1, 0, s,
				    writer_params(w), NULL),
		     CUDA_SUCCESS, "the writer's launch failed");
}

vmm_devptr t_written_block(struct tctx *t, CUstream s, struct writer *w, size_t size)
{
	vmm_devptr x;

	cr_assert_eq(vmm_malloc(t->core, 0, size, 0, NULL, &x, NULL), VMM_OK);
	w->ptr = (void *)(uintptr_t)x;
	w->size = size;
	t_launch_writer(s, w);
	return x;
}

vmm_devptr t_freed_while_written(struct tctx *t, CUstream s, struct writer *w, size_t size)
{
	vmm_devptr x = t_written_block(t, s, w, size);

	cr_assert_eq(vmm_free(t->core, x, NULL), VMM_OK);
	return x;
}
