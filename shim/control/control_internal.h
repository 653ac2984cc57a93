/* What the control plane's files share among themselves (not part of any contract). */
#ifndef VMMSHIM_CONTROL_INTERNAL_H
#define VMMSHIM_CONTROL_INTERNAL_H

#include <stdbool.h>

#include "../../core/heap_offload.h"
#include "../../core/offload/app_vmm.h"
#include "../../core/offload/transition.h"
#include "../protocol/protocol.h"

/* Default bound on the wait for in-flight device calls when closing the gate. */
#define CONTROL_GATE_TIMEOUT_MS 10000

/* How long a sleep or wake may take and how it learns that nobody waits for it any more. */
typedef struct control_limits {
	int timeout_ms;              /* the whole operation, gate and drain included; <= 0: defaults */
	int drain_ms;                /* the drain alone, when shorter than VMMSHIM_SLEEP_TIMEOUT */
	int begin_ms;                /* the wait for another sleep or wake to end; <= 0: timeout_ms,
	                              * else unbounded while a client polls gone, else VMMSHIM_OP_WAIT */
	bool (*gone)(void *arg);     /* polled between steps and while waiting; true: roll back */
	void *gone_arg;
	const char *share_group;     /* sleep: a group sleep's share_group ("PID,..."), or NULL */
	const char *app_release;     /* sleep: a group sleep's app_release ("H,H:PID:XH"), or NULL */
	bool app_defer;              /* wake: leave group-released imports asleep, work held */
} control_limits;

/* shim_sleep / shim_wake with every knob: autowake (a submission while held wakes the process)
 * and the limits. Always: the wait for an operation already in progress is bounded (begin_ms,
 * VMMSHIM_OP_WAIT for the program's own calls: lim NULL), the gate waits at most
 * CONTROL_GATE_TIMEOUT_MS for calls in flight, the device drain at most VMMSHIM_SLEEP_TIMEOUT;
 * lim's timeout bounds the whole operation on top (NULL or <= 0: the copies take as long as they
 * take). An operation that gives up (deadline, gone, control_cancel, exit) rolls back and
 * answers VMM_E_BUSY with why. */
vmm_status control_sleep(const vmm_sleep_opts *opts, bool hold, bool autowake,
			 const control_limits *lim, vmm_transfer_result *res, vmm_error *err);
vmm_status control_wake(const vmm_sleep_opts *opts, const control_limits *lim,
			vmm_transfer_result *res, vmm_error *err);
/* The core's sleep and wake with the memory shared across a group (group_share.c): a sleep
 * whose lim names a share_group releases shared legacy-IPC memory too; a wake imports again what
 * such a sleep released. Same contract as vmm_offload_sleep / vmm_offload_wake. */
vmm_status control_group_sleep(const vmm_offload_parts *parts, const vmm_selection *sel,
			       const vmm_limits *core_lim, const control_limits *lim,
			       vmm_transfer_result *r, vmm_error *err);
vmm_status control_group_wake(const vmm_offload_parts *parts, const vmm_selection *sel,
			      const vmm_limits *core_lim, const control_limits *lim,
			      vmm_transfer_result *r, vmm_error *err);

/* Cancel the sleep or wake in progress (it rolls back); VMM_E_INVALID when none runs. */
vmm_status control_cancel(vmm_error *err);
/* Is a sleep or wake (a client's or the program's own) in progress now? */
bool control_op_running(void);

/* The process's sleep state, for info and status. Answered at once, also while a sleep or wake
 * is in progress (then `changing`, with what is known without waiting for it). */
typedef struct control_state {
	bool held;        /* device work is held until wake */
	bool autowake;    /* a held submission wakes the process */
	bool any_asleep;
	bool all_asleep;  /* something is managed and all of it is asleep */
	bool changing;    /* a sleep or wake is in progress */
	bool partial;     /* a failed sleep or wake could not be undone in full: partly asleep,
	                   * with host copies, until a wake completes it */
} control_state;
void control_state_get(control_state *out);
/* The same, and when no sleep or wake runs (true), none starts, from a client or the program,
 * until control_state_release: what the core's figures say meanwhile is what the state says.
 * false: one runs (changing); nothing to release. Never waits. */
bool control_state_hold(control_state *out);
void control_state_release(void);

/* VMMSHIM_AUTOWAKE=1: autowake is on for every sleep. */
void control_set_autowake_default(bool on);

/* In a forked child: the parent's memory is not the child's to sleep; refuse from now on. */
void control_sleep_after_fork(void);

/* The client a request came from, as the server sees it. */
typedef struct control_client {
	bool (*gone)(void *arg);     /* it hung up: nobody will read the reply */
	void *gone_arg;
	long pid;                    /* for the log (as SO_PEERCRED says) */
} control_client;

/* Answer one parsed request into w (header, records, end). w stays empty when there is nobody to
 * answer (a sleep or wake whose client had gone: it was not run). May run on several threads. */
void control_dispatch(const proto_request *req, const control_client *client, proto_writer *w);
/* In a forked child: the parent's threads are gone; forget their state. */
void control_dispatch_after_fork(void);

/* Answer share_open (another shimmed process opening a legacy IPC handle of ours, share_open.c)
 * from a client of uid/pid: the reply into w and the pieces' new descriptors into fds (at most
 * VMM_SHARE_MAX_PIECES; the caller sends and closes them); *exported: made by the driver now
 * (false: duplicates of kept ones). Only the same uid is answered. */
void control_share_open(const proto_request *req, unsigned uid, long pid, proto_writer *w,
			int *fds, size_t *nfds, bool *exported);
/* The same without waiting, for the reading thread: true with the ok reply in w and at most max
 * descriptors in fds when the export's are kept and the heap is free at once
 * (vmm_share_fds_now: they are duplicates); false with nothing written or held: answer with
 * control_share_open elsewhere. */
bool control_share_open_now(const proto_request *req, unsigned uid, long pid, proto_writer *w,
			    int *fds, size_t max, size_t *nfds);
void control_share_close_fds(const int *fds, size_t n);
/* Answer app_open (app_open.c): a new descriptor of the program's exported handle req->app_handle
 * into *fd (-1 on an error reply; the caller sends and closes it). Same uid only. */
void control_app_open(const proto_request *req, unsigned uid, long pid, proto_writer *w,
		      int *fd);

/* status's app_share records: the program's shared VMM handles (app_share_records.c). */
void control_put_app_shares(proto_writer *w, vmm_app_registry *reg);

/* The protocol's error word for a status. */
const char *control_error_word(vmm_status s);

#endif
