/* One-stream reuse (core/heap.h vmm_ordered_*): while all of the program's device work in flight
 * is in the legacy default stream of one context, the stream itself orders every later user of a
 * freed block after its earlier users, and the heap reuses freed memory at once. The submission
 * hooks tell this module which stream each call goes to: work on another stream pauses the mode
 * (a device sync first), a second context or device ends it for good, before that work is
 * issued. */
#ifndef VMMSHIM_ONE_STREAM_H
#define VMMSHIM_ONE_STREAM_H

#include <stdatomic.h>
#include <stdbool.h>

#include "../core/heap.h"
#include "driver_table.h"

/* True until the mode has ended (whether or not a heap has started it yet). */
extern atomic_bool one_stream_live;

/* End the mode (once): `why` names what broke it, for the info line; synchronizes the devices
 * with a heap so that nothing issued from now on overlaps earlier users of reused memory. */
void one_stream_end(const char *why);

/* A submission `name` to stream s (has_stream false: the call names none, so it goes to the
 * legacy stream unless its form says otherwise: _ptsz/_ptds is the per-thread stream; Peer and
 * MultiDevice involve another context, which ends the mode). `form` caches what the name says,
 * one per call site. Returns true when the call goes to another stream while the mode lives:
 * the caller then calls one_stream_side_done() once the driver has the work. */
bool one_stream_submit_slow(const char *name, _Atomic signed char *form, bool has_stream,
			    CUstream s);
void one_stream_side_done(void);

static inline bool one_stream_submit(const char *name, _Atomic signed char *form,
				     bool has_stream, CUstream s)
{
	return atomic_load_explicit(&one_stream_live, memory_order_relaxed) &&
	       one_stream_submit_slow(name, form, has_stream, s);
}

/* The primary context of dev is in use: a second device ends the mode. */
void one_stream_device_used(int dev);

/* The CUDA heap exists: start the mode there unless the setting is off or it has ended. */
void one_stream_begin(vmm_core *core, bool enabled);

#endif
