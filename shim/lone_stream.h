/* Lone-stream ordering. While every piece of device work the program has submitted went to one
 * stream S (the default stream of one context, or one stream it created), a cuMemFree is ordered
 * on S like a cuMemFreeAsync and a cuMemAlloc takes such a block back at once: S runs the new
 * owner's work after the old owner's, and nobody waits on the host for the device in between.
 *
 * The first submission to any other stream T ends lone mode. T is made to wait, before its own
 * work runs, for an event recorded on S each time a block came back (a join, ordered by the
 * driver): T's work then comes after every former owner of a block taken back was done with it
 * (and not after S's later work, which may wait for T). Every further stream is joined the same
 * way until the event has completed; from then on the heap's plain rule (reuse after a
 * device synchronization) is the only one. What cannot be joined waits for the event on the host
 * instead: a stream capture about to begin (a capture cannot wait for an event recorded outside
 * it), S or its context about to be destroyed, an entry point whose stream cannot be told, and a
 * stream memory wait (it may wait for work another stream submits later, which must not wait for
 * it in turn). A kernel on S that spins until work submitted later to another stream writes
 * a flag, with a block taken back in between, would deadlock against the join: such a program
 * runs with VMMSHIM_LONE_STREAM=0.
 * Lone mode starts at the first submission, if that goes to a stream any thread can name (not a
 * per-thread default stream). Once it has ended, every submission is tracked with an event per
 * stream, and when one stream has had a long run of submissions while every other has finished
 * its work, that stream is lone again: a new episode (PyTorch writes once to a stream of its own
 * at start, and its default stream then gets the rest). A bounded number of episodes, then plain
 * rules for good; the same after a capture, a context's end, a stream only its own thread can
 * name, or many streams (lone_stream.c). */
#ifndef VMMSHIM_LONE_STREAM_H
#define VMMSHIM_LONE_STREAM_H

#include <stdbool.h>
#include <stdint.h>

#include "../core/backend/backend.h"
#include "driver_table.h"

/* A submission whose stream the shim cannot tell from its arguments. */
#define SUBMIT_STREAM_UNKNOWN ((CUstream)~(uintptr_t)0)

/* Before a submission reaches the driver (inside the gate): s as the caller named it (NULL,
 * CU_STREAM_LEGACY, CU_STREAM_PER_THREAD, a handle or SUBMIT_STREAM_UNKNOWN); per_thread for the
 * _ptsz/_ptds entry points, where NULL is the thread's own default stream. `what` is the entry
 * point, for the log line that says why lone mode ended. Returns a token for
 * lone_stream_after_submit, which the caller passes once the driver's call has returned. */
int lone_stream_before_submit(CUstream s, bool per_thread, const char *what);
void lone_stream_after_submit(int token);

/* While lone mode holds: true, with the key the heap orders frees and allocations on
 * (vmm_free_on_stream / vmm_malloc_ordered): S's handle, or its context for a default stream. */
bool lone_stream_key(vmm_stream *key);

/* An allocation ordered on key took back a block freed in that order, whose former owner's work
 * may still run on S: other streams will wait for S's work up to here. Called before the block
 * is handed to the program. */
void lone_stream_reused(vmm_stream key);

/* End lone mode for good, and wait until S's work up to the last block taken back has run:
 * before a stream capture begins (also before any submission: S must never be a capturing
 * stream, whose work runs whenever its graph is launched). `why` goes to the log. */
void lone_stream_end_and_wait(const char *why);

/* A context is about to be destroyed, or a primary context reset or released: whichever it is,
 * lone mode ends for good as in lone_stream_end_and_wait once it has begun (its events may
 * belong to that context). */
void lone_stream_context_ends(const char *why);

/* Stream s is about to be destroyed: if it is S, lone mode ends (its handle may come back as
 * another stream's), joined as any other stream would be. */
void lone_stream_forget(CUstream s);

/* VMMSHIM_LONE_STREAM=0: never enter lone mode, and leave it now if it began. Only before the
 * CUDA heap is made (nothing has been freed in the lone stream's order yet). */
void lone_stream_disable(void);

#endif
