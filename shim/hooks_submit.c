/* Every entry point that submits device work (launches, graph launches, host functions and
 * callbacks, copies, memsets, stream memory operations in both ABIs, decompression batches, in all
 * their _ptsz/_ptds forms; tests/integration/interpose/submit_entry_points.sh checks the driver's
 * exports against ours) passes the submission gate,
 * so that nothing reaches the device while sleep changes its memory, and is counted once the
 * driver has it (submit_count.h), so that the heap knows when no work came since its last
 * synchronization. Each also tells lone-stream ordering which stream its work goes to
 * (lone_stream.h), before the driver has it: a stream that must first wait for the lone stream's
 * work is made to wait before this work is queued. The wrappers are generated from
 * driver_list.h: enter the gate, note the stream, call the driver, note its return, count,
 * leave. */
#include "hooks_common.h"
#include "lone_stream.h"
#include "submit_count.h"

#define DRIVER_GATED(name, params, args, stream, per_thread) \
	CUresult CUDAAPI name params                         \
	{                                                    \
		CUresult r;                                  \
		int lone;                                    \
		gate_enter();                                \
		lone = lone_stream_before_submit(stream, per_thread, #name); \
		r = CALL_REAL(name, args);                   \
		lone_stream_after_submit(lone);              \
		submit_count_note();                         \
		gate_leave();                                \
		return r;                                    \
	}
#include "driver_list.h"
#undef DRIVER_GATED
