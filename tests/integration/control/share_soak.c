/* The sharing soak: soak_target processes with VMMSHIM_SHARE=1 take turns on one simulated GPU
 * (SIMDEV_SHARED) with too little memory for all of them at once. Their threads allocate, free,
 * copy and check device memory against host mirrors, so the shims sleep one another to make
 * room, and each wakes itself at its next device work. Meanwhile this driver kills a process
 * now and then (SIGKILL, whatever it is doing: deciding under the GPU's lock, being slept,
 * copying) and starts a fresh one in its place, sleeps and wakes one, or two as a group, from
 * outside with vmmctl, and asks `vmmctl list` and `status`. In half the epochs some processes
 * run with driver faults injected (SIMDEV_FAIL, one or two calls each). In every other epoch the
 * process of slot 0 exports a buffer through legacy CUDA IPC and another of its own VMM memory
 * as a POSIX descriptor (as NCCL shares its buffers; the descriptor goes through this driver), and most others open both (its replacement, when it is killed, exports new ones;
 * the importers keep the old), so that peers' sleeps, group sleeps and kills meet memory several
 * processes hold: an exporter killed while its group sleeps leaves its importers their own
 * copies. It fails on:
 *  - a mismatch (data lost across a sleep made by a peer, or by vmmctl; shared memory that an
 *    exporter or importer reads differently from the bytes it was filled with),
 *  - an error other than out of memory in a process without faults (an allocation may be
 *    refused after its sharing wait: those are counted and printed),
 *  - a wedge: a vmmctl request not answered within its deadline, threads not done within their
 *    time plus twice the sharing wait, a process that does not exit when asked; where higher
 *    priorities hold the memory a lower one needs (the rules let it wait for as long as they
 *    live), the soak first makes room from outside, as an operator would, and waits as long
 *    again,
 *  - a leak: once every process of an epoch has ended, killed ones included, the GPU's memory
 *    in use must be back to zero, as a fresh process sees it,
 *  - a sleep across GPUs: B bystanders (--bystanders, 1 by default) work on a second simulated
 *    GPU in the same control folder, as on a node of several GPUs; a process slept by a peer of
 *    the other GPU fails the run (the rounds ask their own GPU's members only).
 *
 *   share_soak [--seconds S] [--seed N] [--procs P] [--threads T] [--bystanders B]
 *
 * The seed picks the driver's choices and the threads' work; the interleaving is the machine's.
 * CI runs it for a short time with a fixed seed (meson test control_share_soak); longer runs:
 * scripts/soak.sh --share. Plain C (no Criterion), so that it runs under TSan as it is. */
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fd_pass.h" /* shim/protocol */
#include "harness.h"
#include "soak_faults.h"
#include "soak_run.h"

#define MAX_PROCS 6
#define MAX_BYSTANDERS 4
#define BASE_BUFS 4
#define BASE_BYTES (4u << 20)
/* The GPU per process: each holds 16 MiB for good and its threads up to ~20 MiB each. */
#define MIB_PER_PROC 40

/* The buffer slot 0 shares in an epoch with IPC. */
#define SHARED_BYTES (4u << 20)

struct proc {
	struct target *t;
	int gpu;         /* 0: the soak's GPU, 1: the bystanders' */
	int prio;
	bool faults;     /* driver faults injected: errors allowed, never a mismatch */
	char armed[256]; /* which (SIMDEV_FAIL) */
	double work_end; /* when its threads stop (they then free what they hold) */
	char report[256]; /* its threads' report, when it came before another answer */
	bool imports;    /* it opened or mapped slot 0's shared memory */
};

static struct proc procs[MAX_PROCS];
/* Each process gets VMMSHIM_PRIORITY 0 .. PRIORITIES-1 at random. */
#define PRIORITIES 2
/* The second GPU's processes (group_b), and the pids started on each GPU (gpu_of). */
static struct proc bys[MAX_BYSTANDERS];
static int nbys = 1;
static char group_b[80];
static struct {
	pid_t pid[1024];
	int n;
} started[2];
/* The export the next importers open (slot 0's, while live). */
static struct {
	bool epoch, live, exporter_faults;
	char hex[256];
	unsigned seed;
} ipc;
/* The VMM buffer the next importers map (slot 0's, while live): its descriptor is asked of the
 * exporter for each import, since a descriptor held open would keep the memory resident. */
static struct {
	bool live, exporter_faults;
	unsigned seed;
} vmm;
static int nprocs = 3, threads = 3;
static double seconds = 60, timeout_s, share_wait_s, epoch_len_s;
static bool faults_epoch;
static unsigned rng;
static unsigned long long seed0;
static char dir[64], group[64];
static struct ctl_out o;

static struct {
	long epochs, starts, kills, lists, statuses, outside_sleeps, outside_refused,
		group_sleeps, group_refused, ops, copies, kernels, ooms, errors, slept_by_peer,
		faulty, base_short, exports, opens, ipc_refused, checks, bystander_statuses,
		vmm_exports, vmm_opens, vmm_refused, shares_released, shares_resident,
		exporters_killed_asleep, rooms_made;
} n;

static unsigned rnd(unsigned below)
{
	return below ? (unsigned)rand_r(&rng) % below : 0;
}

static void cleanup_group(void)
{
	char cmd[256];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'; rm -f /dev/shm/simdev-cuda-%u-%s*", dir,
		 (unsigned)getuid(), group);
	if (system(cmd))
		fprintf(stderr, "share_soak: could not clean %s\n", dir);
}

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

static void fail(const char *fmt, ...)
{
	static char log[8192];
	const char *kept = NULL;
	va_list ap;

	fprintf(stderr, "share_soak: FAILED (epoch %ld): ", n.epochs);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	for (int i = 0; i < nprocs + nbys; i++) {
		struct proc *p = i < nprocs ? &procs[i] : &bys[i - nprocs];

		if (!p->t)
			continue;
		kept = soak_keep_log(p->t, i < nprocs ? "gpu-a" : "gpu-b");
		target_log(p->t, log, sizeof(log));
		fprintf(stderr, "share_soak: pid %ld (%s, priority %d, faults '%s'), its log's last "
			"part:\n%s\n", (long)p->t->pid, i < nprocs ? "GPU A" : "GPU B, a bystander",
			p->prio, p->faults ? p->armed : "", strlen(log) > 2500 ?
			log + strlen(log) - 2500 : log);
	}
	if (kept)
		fprintf(stderr, "share_soak: the whole logs of the processes above, and of those "
			"killed in this epoch: %s\n", kept);
	fprintf(stderr, "share_soak: seed %llu; replay: scripts/soak.sh --share --seed %llu "
		"--seconds %g --procs %d --threads %d --bystanders %d\n", seed0, seed0, seconds,
		nprocs, threads, nbys);
	harness_cleanup();
	cleanup_group();
	exit(1);
}

static int read_with_room(struct proc *p, char *reply, size_t cap, int within_ms);

/* c to p, answered with want within within_s (twice that, where room had to be made). */
static void cmd(struct proc *p, const char *c, const char *want, double within_s)
{
	char reply[256];

	if (target_send(p->t, c) || read_with_room(p, reply, sizeof(reply), (int)(within_s * 1000)))
		fail("pid %ld did not answer '%s' within %.0f s", (long)p->t->pid, c, within_s);
	if (strncmp(reply, want, strlen(want)))
		fail("pid %ld: '%s' answered '%s', expected '%s'", (long)p->t->pid, c, reply, want);
}

/* vmmctl with the soak's deadline; exit 5 (no answer in time) is a wedge. */
static int ctl(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static int ctl(const char *fmt, ...)
{
	char args[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(args, sizeof(args), fmt, ap);
	va_end(ap);
	vmmctl_run(&o, dir, -1, "--json --timeout %g %s", timeout_s, args);
	if (o.code == 5 || o.seconds > timeout_s + 5)
		fail("'vmmctl %s' was not answered within %g s (%.1f s): %s", args, timeout_s,
		     o.seconds, o.err);
	return o.code;
}

/* Slot 0 makes a fresh buffer to share with the importers to come (verb: ipcexport or
 * vmmexport), its bytes from seed. Out of memory (the GPU's sharers hold it) is asked again for
 * a while, then the epoch goes on without one; a fault may refuse it in a process with faults.
 * True when it answered "ok" (reply: the answer). */
static bool export_retried(struct proc *p, const char *verb, unsigned seed, char *reply,
			   size_t cap)
{
	char line[64];
	double end = now_s() + share_wait_s * 2;

	snprintf(line, sizeof(line), "%s %u %u", verb, SHARED_BYTES, seed);
	for (;;) {
		if (target_cmd(p->t, line, reply, cap,
			       (int)((share_wait_s * 2 + timeout_s) * 1000)))
			fail("pid %ld did not answer '%s'", (long)p->t->pid, line);
		if (strcmp(reply, "error alloc") || now_s() > end)
			break;
		usleep(200000);
	}
	if (!strncmp(reply, "ok", 2))
		return true;
	if (strcmp(reply, "error alloc") && !p->faults)
		fail("pid %ld: '%s' answered '%s', no fault injected", (long)p->t->pid, line,
		     reply);
	return false;
}

/* Room made from outside (make_room_above): the processes slept, held, for a lower priority,
 * woken again by give_room_back. */
static struct {
	pid_t pid[MAX_PROCS];
	int n;
} room;

static void wake_until_done(const char *pids, int prio);

/* Whether pid is one of the space-separated pids. */
static bool in_pids(const char *pids, pid_t pid)
{
	for (const char *at = pids; at && *at;) {
		char *end;
		long v = strtol(at, &end, 10);

		if (end == at)
			break;
		if (v == (long)pid)
			return true;
		at = end;
	}
	return false;
}

/* The lowest priority among the soak's processes of pids. */
static int group_prio(const char *pids)
{
	int low = PRIORITIES;

	for (int j = 0; j < nprocs; j++)
		if (procs[j].t && in_pids(pids, procs[j].t->pid) && procs[j].prio < low)
			low = procs[j].prio;
	return low;
}

/* A lower priority never sleeps a higher one, working or idle (README, sharing), so a process of
 * ours may wait for as long as the higher priorities of its GPU hold the memory it needs: to
 * wake, to end its threads, to answer a check. Where the soak needs it back, it makes room as an
 * operator would: it sleeps, held, every process of that GPU (0: the soak's, 1: the
 * bystanders') above prio, but for those of pids, the ones it is for. One that a peer slept
 * answers "already" and may wake by itself: the next try asks it again. False: none above. */
static bool make_room_above(int gpu, int prio, const char *pids)
{
	struct proc *on = gpu ? bys : procs;
	bool any = false;

	for (int j = 0; j < (gpu ? nbys : nprocs); j++) {
		struct proc *q = &on[j];
		bool known = false;

		if (!q->t || q->prio <= prio || in_pids(pids, q->t->pid))
			continue;
		any = true;
		for (int k = 0; k < room.n; k++)
			known |= room.pid[k] == q->t->pid;
		if (!ctl("sleep %d", (int)q->t->pid) && !known)
			room.pid[room.n++] = q->t->pid;
	}
	if (any)
		n.rooms_made++;
	return any;
}

/* Wakes what make_room_above slept, one at a time: each is above the one it made room for, so
 * the rules let it sleep that one again. */
static void give_room_back(void)
{
	int held = room.n;

	room.n = 0;
	for (int k = 0; k < held; k++) {
		char pid[16];

		snprintf(pid, sizeof(pid), "%d", (int)room.pid[k]);
		wake_until_done(pid, PRIORITIES);
	}
}

/* p's next line within within_ms; where none comes and higher priorities hold its GPU, room is
 * made for it and the line awaited as long again. Non-zero: no line. */
static int read_with_room(struct proc *p, char *reply, size_t cap, int within_ms)
{
	int r = target_read(p->t, reply, cap, within_ms);
	char pid[16];

	snprintf(pid, sizeof(pid), "%d", (int)p->t->pid);
	if (r && make_room_above(p->gpu, p->prio, pid)) {
		r = target_read(p->t, reply, cap, within_ms);
		give_room_back();
	}
	return r;
}

/* A command to a process whose threads may be at work: their report may come first, when they
 * end while the command waits (for room to wake in, say), and is kept for collect(). Non-zero:
 * no answer within within_ms (twice that where room had to be made). */
static int cmd_past_report(struct proc *p, const char *line, char *reply, size_t cap,
			   int within_ms)
{
	if (target_send(p->t, line) || read_with_room(p, reply, cap, within_ms))
		return -1;
	if (strncmp(reply, "work ", 5))
		return 0;
	snprintf(p->report, sizeof(p->report), "%s", reply);
	return read_with_room(p, reply, cap, within_ms);
}

/* A legacy-IPC export: the handle comes back in hex. */
static void export_shared(struct proc *p)
{
	char reply[256];

	ipc.seed = (unsigned)rand_r(&rng);
	ipc.live = export_retried(p, "ipcexport", ipc.seed, reply, sizeof(reply));
	if (!ipc.live) {
		n.ipc_refused++;
		return;
	}
	snprintf(ipc.hex, sizeof(ipc.hex), "%s", reply + 3);
	ipc.exporter_faults = p->faults;
	n.exports++;
}

/* p opens slot 0's export. The exporter may be asleep (slept by a peer or by vmmctl), or
 * sleeping or waking right then: the open must still come, or be refused only where a fault
 * is injected on either side. */
static void open_shared(struct proc *p)
{
	char line[320], reply[256];

	snprintf(line, sizeof(line), "ipcopen %s %u %u", ipc.hex, SHARED_BYTES, ipc.seed);
	if (target_cmd(p->t, line, reply, sizeof(reply),
		       (int)((share_wait_s * 2 + timeout_s) * 1000)))
		fail("pid %ld did not answer 'ipcopen'", (long)p->t->pid);
	if (!strcmp(reply, "ok")) {
		n.opens++;
		p->imports = true;
		return;
	}
	if (!p->faults && !ipc.exporter_faults)
		fail("pid %ld could not open pid %ld's export: '%s', no fault injected",
		     (long)p->t->pid, (long)procs[0].t->pid, reply);
	n.ipc_refused++;
}

/* A buffer of slot 0's own VMM memory: its descriptor is asked for at each import. */
static void export_vmm(struct proc *p)
{
	char reply[256];

	vmm.seed = (unsigned)rand_r(&rng);
	vmm.live = export_retried(p, "vmmexport", vmm.seed, reply, sizeof(reply));
	if (!vmm.live) {
		n.vmm_refused++;
		return;
	}
	vmm.exporter_faults = p->faults;
	n.vmm_exports++;
}

/* p maps slot 0's VMM buffer: slot 0 exports its handle again (it may be asleep: the export
 * wakes it), this driver passes the descriptor on and closes its own, and p imports it. Only a
 * fault on either side may refuse it. */
static void open_vmm(struct proc *p)
{
	struct proc *x = &procs[0];
	int within_ms = (int)((share_wait_s * 2 + timeout_s) * 1000);
	char line[64], reply[256], msg[16];
	bool faults = p->faults || vmm.exporter_faults;
	size_t nfds = 0;
	int fd = -1;

	/* Slot 0 may be at work, or done (a replacement started late in the epoch works 0.5 s):
	 * a report taken for the answer left the answer to be read as the report (CI, 7 Dec). */
	if (cmd_past_report(x, "vmmsend", reply, sizeof(reply), within_ms))
		fail("pid %ld did not answer 'vmmsend'", (long)x->t->pid);
	if (strcmp(reply, "ok")) {
		if (!faults)
			fail("pid %ld: 'vmmsend' answered '%s', no fault injected", (long)x->t->pid,
			     reply);
		n.vmm_refused++;
		return;
	}
	if (fd_pass_recv(x->t->chan_fd, msg, sizeof(msg), &fd, 1, &nfds,
			 fd_pass_now_ms() + within_ms) <= 0 || nfds != 1)
		fail("pid %ld said it sent its descriptor, none came", (long)x->t->pid);
	if (fd_pass_send(p->t->chan_fd, "vmm", 4, &fd, 1, fd_pass_now_ms() + within_ms))
		fail("pid %ld's channel is closed", (long)p->t->pid);
	close(fd);
	snprintf(line, sizeof(line), "vmmimport %u %u %s", SHARED_BYTES, vmm.seed,
		 rnd(2) ? "keep" : "release");
	if (target_cmd(p->t, line, reply, sizeof(reply), within_ms))
		fail("pid %ld did not answer '%s'", (long)p->t->pid, line);
	if (!strcmp(reply, "ok")) {
		n.vmm_opens++;
		p->imports = true;
		return;
	}
	if (!faults)
		fail("pid %ld could not map pid %ld's VMM buffer: '%s', no fault injected",
		     (long)p->t->pid, (long)x->t->pid, reply);
	n.vmm_refused++;
}

/* One process's long-lived and shared bytes read back in the middle of an epoch (this wakes
 * it when it sleeps). A process with faults may answer with an error, never "corrupt". */
static void check_now(struct proc *p)
{
	char reply[256];

	int within_ms = (int)((share_wait_s * 2 + timeout_s) * 1000);

	if (cmd_past_report(p, "check", reply, sizeof(reply), within_ms))
		fail("pid %ld did not answer 'check'", (long)p->t->pid);
	if (strncmp(reply, "ok", 2) && (strncmp(reply, "error", 5) || !p->faults))
		fail("pid %ld: 'check' answered '%s'%s", (long)p->t->pid, reply,
		     p->faults ? "" : ", no fault injected");
	n.checks++;
}

/* The memory of a simulated GPU for count processes: too little for all of them at once. */
static int gpu_mib(int count)
{
	int mib = MIB_PER_PROC * count * 2 / 3;

	return mib > MIB_PER_PROC ? mib : MIB_PER_PROC;
}

/* Which GPU pid was started on (0: the soak's, 1: the bystanders'), -1 when none of ours. */
static int gpu_of(pid_t pid)
{
	for (int g = 0; g < 2; g++)
		for (int i = 0; i < started[g].n && i < 1024; i++)
			if (started[g].pid[i] == pid)
				return g;
	return -1;
}

/* A sharing soak_target for p on GPU gpu (0: slot i of the soak's, 1: a bystander's), its
 * long-lived buffers made and its threads working until `until`. */
static void start_on(struct proc *p, int gpu, int i, double until, unsigned work_seed)
{
	static char e[11][320];
	const char *env[12];
	char line[64];
	int k = 0;

	p->gpu = gpu;
	p->prio = (int)rnd(PRIORITIES);
	p->faults = faults_epoch && rnd(2);
	p->report[0] = '\0';
	p->imports = false;
	snprintf(e[k++], 320, "VMMSHIM_RUN_DIR=%s", dir);
	snprintf(e[k++], 320, "SIMDEV_SHARED=%s", gpu ? group_b : group);
	snprintf(e[k++], 320, "SIMDEV_MEMORY=%dM", gpu_mib(gpu ? nbys : nprocs));
	snprintf(e[k++], 320, "VMMSHIM_SHARE=1");
	snprintf(e[k++], 320, "VMMSHIM_PRIORITY=%d", p->prio);
	snprintf(e[k++], 320, "VMMSHIM_SHARE_IDLE=200ms");
	snprintf(e[k++], 320, "VMMSHIM_SHARE_SLICE=1");
	snprintf(e[k++], 320, "VMMSHIM_SHARE_WAIT=%d", (int)share_wait_s);
	snprintf(e[k++], 320, "VMMSHIM_LOG=info");
	if (p->faults) {
		soak_faults_draw(rnd, 1 + (int)rnd(2), epoch_len_s, ctl_slow(), p->armed,
				 sizeof(p->armed));
		snprintf(e[k++], 320, "SIMDEV_FAIL=%s", p->armed);
		n.faulty++;
	}
	for (int j = 0; j < k; j++)
		env[j] = e[j];
	env[k] = NULL;
	p->t = target_start_with_channel(env);
	if (!p->t)
		fail("a sharing program did not start under the shim");
	n.starts++;
	if (started[gpu].n < 1024)
		started[gpu].pid[started[gpu].n++] = p->t->pid;
	/* Its long-lived buffers wait for room like any allocation, and a lower priority may get
	 * none while higher ones hold the GPU (out of memory, as the rules say): asked again for a
	 * while, then it works with those it has. */
	snprintf(line, sizeof(line), "base %d %u", BASE_BUFS, BASE_BYTES);
	for (double end = now_s() + share_wait_s * 2;;) {
		char reply[64];

		if (target_cmd(p->t, line, reply, sizeof(reply),
			       (int)((share_wait_s * 2 + timeout_s) * 1000)))
			fail("pid %ld did not answer '%s'", (long)p->t->pid, line);
		if (!strcmp(reply, "ok"))
			break;
		if (strcmp(reply, "error alloc"))
			fail("pid %ld: '%s' answered '%s'", (long)p->t->pid, line, reply);
		if (now_s() > end) {
			n.base_short++;
			break;
		}
		usleep(200000);
	}
	if (!gpu && ipc.epoch && i == 0) {
		export_shared(p);
		export_vmm(p);
	} else if (!gpu && ipc.epoch && (i == 1 || rnd(3))) {
		/* slot 1 always: a short run has an importer */
		if (ipc.live)
			open_shared(p);
		if (vmm.live)
			open_vmm(p);
	}
	p->work_end = until;
	snprintf(line, sizeof(line), "work %d %.1f %u", threads, until - now_s() > 0.5 ?
		 until - now_s() : 0.5, work_seed);
	cmd(p, line, "work started", timeout_s);
}

static void start(int i, double until, unsigned work_seed)
{
	start_on(&procs[i], 0, i, until, work_seed);
}

/* Killed whatever it is doing; the slot stays empty until start() fills it. */
static void kill_slot(int i)
{
	kill(procs[i].t->pid, SIGKILL);
	soak_keep_log(procs[i].t, "killed");
	target_kill(procs[i].t);
	procs[i].t = NULL;
	n.kills++;
}

/* Killed whatever it is doing; a fresh process takes its place for the rest of the epoch. */
static void kill_and_replace(int i, double until)
{
	kill_slot(i);
	start(i, until, (unsigned)rand_r(&rng));
}

/* Held processes must wake: a wake from outside makes room under the sharing rules, and is
 * tried again (a fault, memory not there yet) until the sharing wait has passed three times.
 * Refused for want of memory after its own sharing wait, it has room made above prio, the
 * lowest priority among pids (the caller gives it back once done with them). */
static void wake_until_done(const char *pids, int prio)
{
	double end = now_s() + share_wait_s * 3 + timeout_s;

	while (ctl("wake %s", pids)) {
		if (now_s() > end)
			fail("%s could not be woken for %.0f s: %s", pids,
			     share_wait_s * 3 + timeout_s, o.out);
		if (strstr(o.out, "\"oom\""))
			make_room_above(0, prio, pids);
		usleep(200000);
	}
}

/* What a group sleep did with the memory its members share (vmmctl's `shared` lines). */
static void count_shares(void)
{
	for (const char *at = o.out; (at = strstr(at, "\"resident\": ")); at++) {
		if (strncmp(at + 12, "false", 5))
			n.shares_resident++;
		else
			n.shares_released++;
	}
}

/* vmmctl sleeps pids (one, or a group: all or none), with autowake or held and woken again by
 * vmmctl: refused is allowed (a sleep or wake of its own in progress, a fault), a wedge is
 * not. */
static void sleep_from_outside(const char *pids, int prio, long *slept, long *refused)
{
	bool autowake = rnd(2);

	if (ctl("sleep %s%s", pids, autowake ? " --autowake" : "")) {
		(*refused)++;
		return;
	}
	(*slept)++;
	count_shares();
	if (autowake)
		return;
	usleep(rnd(300000));
	wake_until_done(pids, prio);
	give_room_back();
}

static void outside_cycle(int i)
{
	char pid[16];

	snprintf(pid, sizeof(pid), "%d", (int)procs[i].t->pid);
	sleep_from_outside(pid, procs[i].prio, &n.outside_sleeps, &n.outside_refused);
}

/* Slot 0 and every process that opened what it shared slept as a group and held (so that the
 * group holds all of it and may release it), slot 0 killed meanwhile (its host copy of what it
 * shared goes with it), the importers woken and their bytes checked: natively an import keeps
 * the memory alive, so the shared bytes must come back, from each importer's own copy. */
static bool exporter_killed_asleep(double until)
{
	char pids[16 * MAX_PROCS], *at = pids;
	int importers = 0;

	at += sprintf(at, "%d", (int)procs[0].t->pid);
	for (int j = 1; j < nprocs; j++)
		if (procs[j].imports) {
			at += sprintf(at, " %d", (int)procs[j].t->pid);
			importers++;
		}
	if (!importers)
		return false;
	/* Members a peer slept alone keep what they share mapped (docs/vmmctl.md): awake first,
	 * so that this sleep releases it. A peer may still sleep one of them in between: then the
	 * memory stays resident, and the group is woken and slept again, three times at most
	 * (the kill comes after the last either way: resident memory must survive it too). */
	for (int tries = 0;; tries++) {
		ctl("wake %s", pids);
		if (ctl("sleep %s", pids)) {
			n.group_refused++;
			return true;
		}
		n.group_sleeps++;
		count_shares();
		if (!strstr(o.out, "\"resident\": true") || tries == 2)
			break;
		wake_until_done(pids, group_prio(pids));
		give_room_back();
	}
	kill_slot(0);
	n.exporters_killed_asleep++;
	/* Lowest priority first, and slot 0's replacement only after: a higher priority awake
	 * (a woken importer, the fresh process at work) may keep the memory a lower one needs
	 * to wake, for as long as it works, since a lower priority never sleeps a higher one
	 * (README, sharing). The CI seed once waited 30 s so on a priority-1 newcomer. */
	for (int prio = 0; prio < PRIORITIES; prio++)
		for (int j = 1; j < nprocs; j++)
			if (procs[j].imports && procs[j].prio == prio) {
				char pid[16];

				snprintf(pid, sizeof(pid), "%d", (int)procs[j].t->pid);
				wake_until_done(pid, prio);
				check_now(&procs[j]);
				give_room_back();
			}
	start(0, until, (unsigned)rand_r(&rng));
	return true;
}

/* Two of them slept as a group, then woken as one, or left to wake themselves. In a sharing
 * epoch, now and then the exporter of the pair is killed while they sleep. */
static void group_cycle(int i, double until)
{
	int j = (i + 1 + (int)rnd((unsigned)nprocs - 1)) % nprocs;
	char pids[40];

	if (ipc.epoch && rnd(2) && exporter_killed_asleep(until))
		return;
	snprintf(pids, sizeof(pids), "%d %d", (int)procs[i].t->pid, (int)procs[j].t->pid);
	sleep_from_outside(pids, group_prio(pids), &n.group_sleeps, &n.group_refused);
}

static void list(void)
{
	if (ctl("list"))
		fail("vmmctl list failed: %s %s", o.out, o.err);
	n.lists++;
}

/* The status of p (on GPU gpu): who slept it, if a peer did, is a process of its own GPU. */
static void status_on(struct proc *p, int gpu)
{
	long long by;

	if (ctl("status %d", (int)p->t->pid) && !strstr(o.out, "busy"))
		fail("status of pid %ld failed: %s %s", (long)p->t->pid, o.out, o.err);
	n.statuses++;
	by = json_num(o.out, NULL, "slept_by");
	if (by > 0 && gpu_of((pid_t)by) != gpu)
		fail("pid %ld (GPU %c) was slept by pid %lld of %s", (long)p->t->pid, "AB"[gpu],
		     by, gpu_of((pid_t)by) < 0 ? "no GPU of this soak" : "the other GPU");
	if (by > 0)
		n.slept_by_peer++;
}

static void status(int i)
{
	status_on(&procs[i], 0);
}

/* Its threads' report: no mismatch, no error but out of memory, nothing left unfreed. */
static void collect(struct proc *p)
{
	double within = p->work_end - now_s() + share_wait_s * 2 + timeout_s;
	long ops, copies, kernels, errors, ooms;
	int mismatches, unfreed;
	char reply[256];

	if (p->report[0])
		snprintf(reply, sizeof(reply), "%s", p->report);
	else if (read_with_room(p, reply, sizeof(reply), (int)((within > 1 ? within : 1) * 1000)))
		fail("pid %ld's threads were not done within %.0f s of their end (and as long again "
		     "with room made)", (long)p->t->pid, share_wait_s * 2 + timeout_s);
	p->report[0] = '\0';
	if (sscanf(reply, "work ops=%ld copies=%ld kernels=%ld mismatches=%d errors=%ld "
		   "unfreed=%d ooms=%ld", &ops, &copies, &kernels, &mismatches, &errors, &unfreed,
		   &ooms) != 7)
		fail("pid %ld's threads said '%s'", (long)p->t->pid, reply);
	if (mismatches)
		fail("pid %ld: %d mismatches: data lost (%s)", (long)p->t->pid, mismatches, reply);
	if (errors && !p->faults)
		fail("pid %ld: %ld errors other than out of memory, no fault injected (%s)",
		     (long)p->t->pid, errors, reply);
	if (unfreed)
		fail("pid %ld: %d buffers could not be freed", (long)p->t->pid, unfreed);
	n.ops += ops;
	n.copies += copies;
	n.kernels += kernels;
	n.ooms += ooms;
	n.errors += errors;
}

/* With every process of the epoch gone, a fresh one sees the whole GPU (of group grp, mib MiB)
 * free. */
static void no_leak_on(const char *grp, int mib)
{
	const char *env[] = { "VMMSHIM_RUN_DIR=", NULL, NULL, NULL };
	char run[160], shared[160], mem[64], reply[64];
	struct proc fresh = { 0 };
	unsigned long long used = 1;

	snprintf(run, sizeof(run), "VMMSHIM_RUN_DIR=%s", dir);
	snprintf(shared, sizeof(shared), "SIMDEV_SHARED=%s", grp);
	snprintf(mem, sizeof(mem), "SIMDEV_MEMORY=%dM", mib);
	env[0] = run;
	env[1] = shared;
	env[2] = mem;
	fresh.t = target_start(env);
	if (!fresh.t)
		fail("the fresh program did not start");
	if (target_cmd(fresh.t, "memused", reply, sizeof(reply), (int)(timeout_s * 1000)) ||
	    sscanf(reply, "used %llu", &used) != 1)
		fail("the fresh program did not say its memory: '%s'", reply);
	if (used)
		fail("%llu bytes of GPU %s still in use once every process has ended", used, grp);
	if (target_stop(fresh.t, (int)(timeout_s * 1000)))
		fail("the fresh program did not exit cleanly");
	target_free(fresh.t);
}

static void epoch(double secs)
{
	double until = now_s() + secs;

	n.epochs++;
	epoch_len_s = secs;
	faults_epoch = rnd(2);
	ipc.epoch = n.epochs % 2 == 0; /* every other one, so that CI's two epochs have one */
	ipc.live = false;
	vmm.live = false;
	printf("share_soak: epoch %ld, %.0f s, %d processes of %d threads%s%s\n", n.epochs, secs,
	       nprocs, threads, faults_epoch ? ", some with driver faults" : "",
	       ipc.epoch ? ", sharing memory through IPC and VMM descriptors" : "");
	fflush(stdout);
	for (int i = 0; i < nprocs; i++)
		start(i, until, (unsigned)rand_r(&rng));
	for (int b = 0; b < nbys; b++)
		start_on(&bys[b], 1, b, until, (unsigned)rand_r(&rng));
	/* A sharing epoch kills its exporter under a group sleep once halfway, if it has importers. */
	bool killed_asleep = !ipc.epoch;

	while (now_s() < until - 0.5) {
		int r = (int)rnd(100), i = (int)rnd((unsigned)nprocs);

		if (!killed_asleep && now_s() > until - secs / 2) {
			killed_asleep = true;
			exporter_killed_asleep(until);
		} else if (r < 8)
			kill_and_replace(i, until);
		else if (r < 25)
			outside_cycle(i);
		else if (r < 33)
			group_cycle(i, until);
		else if (r < 45)
			list();
		else if (r < 52)
			check_now(&procs[i]);
		else if (r < 60 && nbys) {
			status_on(&bys[rnd((unsigned)nbys)], 1);
			n.bystander_statuses++;
		} else
			status(i);
		usleep(100000 + rnd(300000));
	}
	for (int i = 0; i < nprocs; i++)
		collect(&procs[i]);
	for (int b = 0; b < nbys; b++)
		collect(&bys[b]);
	/* Every process's long-lived bytes, asleep or not (a check wakes it). */
	for (int i = 0; i < nprocs; i++)
		cmd(&procs[i], "check", "ok", share_wait_s * 2 + timeout_s);
	for (int b = 0; b < nbys; b++) {
		cmd(&bys[b], "check", "ok", share_wait_s * 2 + timeout_s);
		status_on(&bys[b], 1);
		n.bystander_statuses++;
	}
	list();
	/* Most exit when asked; one epoch in three kills one at the end. */
	for (int i = 0; i < nprocs; i++) {
		if (i == 0 && rnd(3) == 0) {
			kill(procs[i].t->pid, SIGKILL);
			target_kill(procs[i].t);
			n.kills++;
		} else {
			int code = target_stop(procs[i].t, (int)(timeout_s * 1000));

			if (code)
				fail("pid %ld did not exit cleanly (%d)", (long)procs[i].t->pid, code);
			if (soak_keeping_all_logs())
				soak_keep_log(procs[i].t, procs[i].faults ? "ended-faults" : "ended");
			target_free(procs[i].t);
		}
		procs[i].t = NULL;
	}
	for (int b = 0; b < nbys; b++) {
		int code = target_stop(bys[b].t, (int)(timeout_s * 1000));

		if (code)
			fail("bystander pid %ld did not exit cleanly (%d)", (long)bys[b].t->pid, code);
		if (soak_keeping_all_logs())
			soak_keep_log(bys[b].t, "ended-bystander");
		target_free(bys[b].t);
		bys[b].t = NULL;
	}
	no_leak_on(group, gpu_mib(nprocs));
	if (nbys)
		no_leak_on(group_b, gpu_mib(nbys));
	soak_drop_kept_logs();
}

int main(int argc, char **argv)
{
	double start_s = now_s(), epoch_s;

	struct soak_args a = { .seconds = seconds, .threads = threads, .procs = nprocs,
			       .bystanders = nbys };

	if (!soak_args_parse(argc, argv, "share_soak", MAX_PROCS, &a))
		return 2;
	seconds = a.seconds;
	seed0 = a.seed;
	threads = a.threads;
	nprocs = a.procs;
	nbys = a.bystanders;
	rng = (unsigned)(seed0 ^ (seed0 >> 32));
	timeout_s = 15 * ctl_slow();
	share_wait_s = 5 * ctl_slow();
	snprintf(dir, sizeof(dir), "/tmp/vmmshim-sharesoak-XXXXXX");
	if (!mkdtemp(dir))
		return fprintf(stderr, "share_soak: no run folder\n"), 1;
	snprintf(group, sizeof(group), "sharesoak%ld_%ld", (long)getpid(), (long)time(NULL));
	/* Its name starts with the first's: cleanup_group removes both. */
	snprintf(group_b, sizeof(group_b), "%s_b", group);
	epoch_s = seconds < 30 ? seconds / 2 : 15;
	printf("share_soak: seed %llu, %g s, %d processes, %d threads each; %d bystanders on "
	       "another GPU\n", seed0, seconds, nprocs, threads, nbys);
	soak_run_epochs(start_s, seconds, epoch_s, epoch);
	cleanup_group();
	printf("share_soak: passed, seed %llu, %.0f s: %ld epochs, %ld processes started (%ld "
	       "with driver faults), %ld killed; %ld vmmctl sleeps from outside (%ld refused), "
	       "%ld group sleeps (%ld refused), %ld lists, %ld statuses (%ld showed a process "
	       "slept by a peer), %ld checks; IPC: %ld exports, %ld opens (%ld refused by "
	       "faults or memory); VMM descriptors: %ld exports, %ld imports (%ld refused); "
	       "group sleeps released VMM-shared memory %ld times and kept it resident %ld "
	       "times; "
	       "%ld exporters killed while their group slept; room made from outside %ld times "
	       "for a lower priority; the threads: %ld operations, %ld copies, %ld kernels, %ld "
	       "allocations refused for want of memory (and %ld processes short of long-lived "
	       "buffers), %ld errors from faults; %ld statuses of bystanders; 0 mismatches, 0 "
	       "leaks, 0 wedges, 0 sleeps across GPUs\n",
	       seed0, now_s() - start_s, n.epochs, n.starts, n.faulty, n.kills, n.outside_sleeps,
	       n.outside_refused, n.group_sleeps, n.group_refused, n.lists, n.statuses,
	       n.slept_by_peer, n.checks, n.exports, n.opens, n.ipc_refused, n.vmm_exports,
	       n.vmm_opens, n.vmm_refused, n.shares_released, n.shares_resident,
	       n.exporters_killed_asleep, n.rooms_made, n.ops, n.copies,
	       n.kernels, n.ooms, n.base_short, n.errors, n.bystander_statuses);
	return 0;
}
