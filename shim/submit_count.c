/* The process's count of device submissions (submit_count.h). */
#include "submit_count.h"

_Atomic uint64_t submit_count;

uint64_t submit_count_read(vmm_backend *be)
{
	(void)be;
	return atomic_load_explicit(&submit_count, memory_order_acquire);
}
