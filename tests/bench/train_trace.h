/* A replay of what PyTorch asks of cudaMalloc/cudaFree when it trains a transformer on
 * variable-length batches with PYTORCH_NO_CUDA_MEMORY_CACHING=1: every tensor is one malloc and
 * one free, in the order of forward, loss, backward, optimizer step and zero_grad. */
#ifndef VMM_BENCH_TRAIN_TRACE_H
#define VMM_BENCH_TRAIN_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "driver_model.h"
#include "heap.h"
#include "phys_peak.h"

enum train_shape {
	TRAIN_FIXED_BATCH,      /* a model sized to the budget; 8 sequences of varying length */
	TRAIN_VARLEN,           /* the H200's PyTorch benchmark (train.py --mode varlen) */
};

struct train_result {
	int steps;
	size_t hidden, layers, max_seq, batch;
	bool varlen;
	uint64_t peak_live;        /* bytes asked for, as the core counts them */
	uint64_t peak_native;      /* what cudaMalloc would hold at peak (2 MiB pages, 512 B below) */
	uint64_t peak_mapped;
	uint64_t end_mapped;
	uint64_t end_driver_used;  /* total - free as the driver reports it, at the end */
	uint64_t syncs, syncs_steady;  /* all steps; the second half only */
	uint64_t syncs_ahead;          /* made by the core's thread (--sync-ahead), all steps */
	uint64_t handles_created, handles_released;
	uint64_t allocs_per_step;
	double ns_per_call;        /* mean ns of one malloc or free (host side) */
	int failed;                /* allocations that failed (0 expected) */
	struct driver_counts steady; /* driver calls of the second half (driver_model_attach'd) */
	double worst_step_us;   /* the second half's costliest step in modelled driver time */
	struct phys_peak phys;  /* the device's physical memory, where the driver says (simdev) */
};

/* Run `steps` training steps on device 0 of core; TRAIN_FIXED_BATCH sizes the model so that its
 * peak live memory is about `budget` bytes. seed picks the shapes (0: the ones printed in the
 * README's figures). Frees everything at the end. */
void train_trace(vmm_core *core, size_t budget, enum train_shape shape, int steps,
		 uint64_t seed, struct train_result *out);

#endif
