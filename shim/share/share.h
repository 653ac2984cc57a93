/* GPU sharing (VMMSHIM_SHARE=1): an allocation that finds no device memory, after the heap's own
 * cache and quarantine, asks the other sharing processes of this user on the same GPU to give
 * back their cached memory, then sleeps eligible ones (lower priority first; equal priority only
 * when idle or past their time slice; never higher), and retries; a process slept this way wakes
 * by itself at its next device work, waiting (bounded, without spinning) for memory under the same
 * rules. One decision at a time per GPU: a lock file per GPU UUID in the control folder (flock,
 * dropped by the kernel when a holder dies). docs: README "Sharing a GPU". */
#ifndef VMMSHIM_SHARE_H
#define VMMSHIM_SHARE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../../core/heap.h"
#include "../protocol/protocol.h"
#include "../runtime.h"

/* Called once the runtime exists (rt->cfg read): turns sharing on when VMMSHIM_SHARE=1. */
void share_init(const shim_runtime *rt);
bool share_enabled(void);

/* An attempt to serve what needed the memory (an allocation, a wake); true when it succeeded. */
typedef bool (*share_try_fn)(void *arg);

/* Allocation with sharing: vmm_malloc (vmm_malloc_on_stream), and on VMM_E_OOM room made for it
 * under the sharing rules (peers' caches trimmed, eligible peers slept, within
 * VMMSHIM_SHARE_WAIT), then again. Called from the hooks inside the gate (it leaves and re-enters
 * the gate around the wait). Without sharing it is exactly the plain call. */
vmm_status share_malloc(vmm_core *core, int dev, size_t size, size_t align, const char *tag,
			vmm_devptr *out, vmm_error *err);
vmm_status share_malloc_on_stream(vmm_core *core, int dev, size_t size, const char *tag,
				  vmm_stream stream, vmm_devptr *out, bool *reused, vmm_error *err);

/* This process gave device memory back (to its cache, which counts as free, or to the driver),
 * or was slept: wakes the sharing processes that wait for memory on its GPUs. Cheap when nobody
 * waits (a clock read per GPU); nothing without sharing. */
void share_note_freed(void);

/* The autowake of a process with sharing on: wake, waiting for memory under the rules. */
void share_autowake(void);
/* A wake asked from outside (vmmctl) of device dev (-1: any) and tag (NULL: every tag) that
 * found too little free memory: room made for what it brings back under the same rules as the
 * process's own wake (peers trimmed, eligible ones slept, a wait for memory freed), `wake` run
 * under the GPU's lock, until until_ms or the sharing wait. VMM_E_OOM with why when no room
 * came. */
vmm_status share_wake_from_outside(int dev, const char *tag, share_try_fn wake, void *arg,
				   long long until_ms, vmm_error *err);

/* The control server: a sharing peer slept this process (why), or a wake brought it back. */
void share_note_slept(long by_pid, const char *reason);
void share_note_woken(void);

/* The info record's sharing fields (share, priority, gpus, idle_ms, resident_ms, slept_by,
 * slept_why, asleep_ms, waiting, waited_ms, looks). */
void share_put_info(proto_writer *w);

/* Memory served on driver ordinal dev (an allocation, or the program's own cuMemCreate): from the
 * first on, this process is a member of that GPU (asked for room by the others' rounds) and its
 * frees wake the GPU's waiters. One load once done; nothing without sharing. */
void share_join_gpu(int dev);

/* Exit: this process leaves the member tables of its GPUs (a killed one is pruned by the others,
 * share_members.c). In a forked child: it joins at its own first allocation. */
void share_members_exit(void);
void share_members_after_fork(void);

/* The UUID string of a driver ordinal ("GPU-..."); false when the driver does not say. */
bool share_gpu_uuid(int dev, char *out, size_t cap);

#endif
