/* VMMSHIM_ALLOC_TRACE: a record of every device allocation and free the core serves, one line
 * each, in the order the program made them, so that its peak and the heap's work can be replayed
 * and studied off the GPU (tests/bench: `bench_core --replay FILE` on simdev). The lines:
 *   a SIZE PTR          cuMemAlloc (and its pitched form) of SIZE bytes that returned PTR (hex)
 *   A SIZE PTR STREAM   a stream-ordered allocation, on STREAM (hex)
 *   f PTR / F PTR       a free / a stream-ordered free of PTR
 * Each line is written as it happens (a write per call: a diagnostic mode, not for production
 * timing). */
#ifndef VMMSHIM_ALLOC_TRACE_H
#define VMMSHIM_ALLOC_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Start writing to path ("%p" in it becomes the process id); "" leaves tracing off. A file that
 * cannot be created gets one warning and no trace. */
void alloc_trace_open(const char *path);
void alloc_trace_malloc(size_t size, uint64_t ptr, bool on_stream, uint64_t stream);
void alloc_trace_free(uint64_t ptr, bool on_stream);

#endif
