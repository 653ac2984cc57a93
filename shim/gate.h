/* The submission gate. Every hook that submits device work (launches, copies, memsets, graph
 * launches, host functions, stream-ordered allocations and frees, in all their _ptsz/_ptds forms)
 * and every hooked allocation enters it; sleep closes it, so that nothing can touch device memory
 * while that memory changes state.
 *
 * Open: gate_enter is two atomic operations. Closed: gate_enter waits until gate_open (or, with
 * autowake on, asks for a wake and waits for it). gate_close stops new entries and waits until
 * the calls already inside have left. A thread that is itself inside the gate when it closes it
 * (the in-process API called from a hook) is not waited for. */
#ifndef VMMSHIM_GATE_H
#define VMMSHIM_GATE_H

#include <stdbool.h>

#include "../core/vmm_error.h"

/* gate_enter() and gate_try_enter() note the calling function's name (the hook), so that a close
 * that gives up can say which calls it waited for (gate_who.h). */
void gate_enter_as(const char *what);
#define gate_enter() gate_enter_as(__func__)
void gate_leave(void);
/* Enter only if the gate is open (true: inside, leave with gate_leave); never waits. */
bool gate_try_enter_as(const char *what);
#define gate_try_enter() gate_try_enter_as(__func__)

/* Stop new submissions and wait (at most timeout_ms; <0 = forever) for those in flight.
 * VMM_E_BUSY on timeout, with the gate reopened; its message has the number of threads it gave
 * up on and the calls they were in. */
vmm_status gate_close(int timeout_ms, vmm_error *err);
/* The same, also giving up (VMM_E_BUSY, gate reopened) as soon as stop(arg) says so: it is asked
 * every few tens of milliseconds while the wait lasts, without the gate's lock held. */
vmm_status gate_close_within(int timeout_ms, bool (*stop)(void *arg), void *arg, vmm_error *err);
void gate_open(void);
bool gate_is_closed(void);
/* Device calls that met the gate closed and waited for it, since the start. */
unsigned long long gate_held_calls(void);

/* GPU sharing's idle rule: with tracking on, each entry stamps the time (a coarse clock read);
 * gate_idle_ms says how long ago the last one was. Off: one relaxed load per entry. */
void gate_track_entries(bool on);
long long gate_idle_ms(void);

/* With autowake, a submission that meets a closed gate calls wake_fn (once, whoever comes first)
 * instead of only waiting. */
void gate_set_autowake(bool on, void (*wake_fn)(void));

#endif
