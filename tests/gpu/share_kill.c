/* An exporter killed while its group sleeps, on one GPU: what an importer must keep.
 *
 *   share_kill vmm|ipc MIB VMMCTL
 *
 * The process started (the orchestrator, which makes no CUDA call) starts an exporter: MIB MiB
 * filled with a pattern, shared either as the program's own VMM memory (cuMemCreate, exported as
 * a POSIX descriptor, as NCCL shares its buffers) or through legacy IPC (cuMemAlloc and
 * cuIpcGetMemHandle, as torch.multiprocessing does). An importer (fork + exec, the descriptor
 * inherited) maps it and checks every byte. Under the shim (its vmmshim_sleep is found) the two
 * are then slept as one group with `VMMCTL --json sleep E I`, which must release the shared
 * memory; natively nothing is slept. Then the exporter is killed (SIGKILL), the importer woken
 * (`VMMCTL wake I`, under the shim), and the importer checks every byte again: natively its import
 * keeps the memory alive, so under the shim the bytes must come back from the importer's own copy.
 *
 * Prints "RESULT ..." lines that must be the same natively and under the shim, and, under the
 * shim, "GROUP ..." lines: the sleep's and the wake's exit codes and seconds, and the importer's
 * part of the sleep (its copy). Exit 0 when every check held.
 * Build: nvcc -cudart none -I../../shim/protocol share_kill.c ../../shim/protocol/fd_pass.c -lcuda
 * -ldl (fd_pass: the descriptor between processes, every wait with a deadline) */
#include <dlfcn.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fd_pass.h"
#include "probe_driver.h" /* CK: a failed driver call ends the process; now_ms */

#define SEED 20261207u
#define WAIT_MS 60000 /* for the exporter's export */

static void pattern(unsigned char *p, size_t n)
{
	uint32_t x = SEED;

	for (size_t i = 0; i < n; i++) {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		p[i] = (unsigned char)x;
	}
}

/* "same", or "differs at N" (in out), comparing the device bytes at d with the pattern. */
static void compare(CUdeviceptr d, size_t n, char *out, size_t cap)
{
	unsigned char *h = malloc(n), *w = malloc(n);
	size_t at = 0;

	if (!h || !w) {
		snprintf(out, cap, "no host memory");
		exit(2);
	}
	pattern(w, n);
	CK(cuMemcpyDtoH(h, d, n));
	while (at < n && h[at] == w[at])
		at++;
	if (at == n)
		snprintf(out, cap, "same");
	else
		snprintf(out, cap, "differs at %zu", at);
	free(h);
	free(w);
}

static CUdevice init(void)
{
	CUdevice dev;
	CUcontext ctx;

	CK(cuInit(0));
	CK(cuDeviceGet(&dev, 0));
	CK(cuDevicePrimaryCtxRetain(&ctx, dev));
	CK(cuCtxSetCurrent(ctx));
	return dev;
}

static CUdeviceptr map_handle(CUmemGenericAllocationHandle h, size_t n, CUdevice dev)
{
	CUmemAllocationProp prop;
	CUmemAccessDesc rw;
	CUdeviceptr d;

	probe_device_memory(dev, &prop, &rw);
	CK(cuMemAddressReserve(&d, n, 0, 0, 0));
	CK(cuMemMap(d, n, 0, h, 0));
	CK(cuMemSetAccess(d, n, &rw, 1));
	return d;
}

/* The exporter: its shared memory, filled; the export goes to the orchestrator on sock (a
 * descriptor, or the IPC handle in hex). Then it waits to be killed. */
static int exporter(bool vmm, size_t n, int sock)
{
	CUdevice dev = init();
	unsigned char *h = malloc(n);
	char msg[160] = "vmm";
	CUdeviceptr d;
	int fd = -1;

	if (!h)
		return 2;
	pattern(h, n);
	if (vmm) {
		CUmemAllocationProp p;
		CUmemAccessDesc rw;
		CUmemGenericAllocationHandle mh;

		probe_device_memory(dev, &p, &rw);
		p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
		CK(cuMemCreate(&mh, n, &p, 0));
		d = map_handle(mh, n, dev);
		CK(cuMemcpyHtoD(d, h, n));
		CK(cuMemExportToShareableHandle(&fd, mh, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
						0));
	} else {
		CUipcMemHandle ih;

		CK(cuMemAlloc(&d, n));
		CK(cuMemcpyHtoD(d, h, n));
		CK(cuIpcGetMemHandle(&ih, d));
		for (size_t i = 0; i < sizeof(ih); i++)
			sprintf(msg + 2 * i, "%02x", (unsigned char)ih.reserved[i]);
	}
	CK(cuCtxSynchronize());
	if (fd_pass_send(sock, msg, strlen(msg) + 1, &fd, fd >= 0, fd_pass_now_ms() + WAIT_MS))
		return 2;
	if (fd >= 0)
		close(fd); /* as NCCL does once its peer has it: no descriptor keeps it resident */
	free(h);
	pause(); /* killed */
	return 0;
}

/* The importer: maps the export (arg: the inherited descriptor, or the hex handle), says
 * whether its bytes are the pattern, then answers "verify" on stdin until EOF. */
static int importer(bool vmm, size_t n, const char *arg)
{
	CUdevice dev = init();
	CUdeviceptr d;
	char line[64], res[64];

	if (vmm) {
		CUmemGenericAllocationHandle mh;
		int fd = atoi(arg);

		CK(cuMemImportFromShareableHandle(&mh, (void *)(intptr_t)fd,
						  CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
		close(fd);
		d = map_handle(mh, n, dev);
		CK(cuMemRelease(mh)); /* the mapping holds it, as NCCL's peers leave it */
	} else {
		CUipcMemHandle ih;

		for (size_t i = 0; i < sizeof(ih); i++) {
			unsigned v;

			if (sscanf(arg + 2 * i, "%2x", &v) != 1)
				return 2;
			ih.reserved[i] = (char)v;
		}
		CK(cuIpcOpenMemHandle(&d, ih, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
	}
	compare(d, n, res, sizeof(res));
	printf("imported %s\n", res);
	fflush(stdout);
	while (fgets(line, sizeof(line), stdin)) {
		compare(d, n, res, sizeof(res));
		printf("verify %s\n", res);
		fflush(stdout);
	}
	return 0;
}

/* fork + exec of this program with args; its stdin and stdout are pipes (*in, *out). The
 * descriptor named in its arguments is inherited (none here is close-on-exec). */
static pid_t spawn(char *const argv[], FILE **in, FILE **out)
{
	int to[2], from[2];
	pid_t pid;

	if (pipe(to) || pipe(from))
		return -1;
	pid = fork();
	if (pid == 0) {
		dup2(to[0], 0);
		dup2(from[1], 1);
		close(to[1]);
		close(from[0]);
		execv("/proc/self/exe", argv);
		_exit(127);
	}
	close(to[0]);
	close(from[1]);
	*in = fdopen(to[1], "w");
	*out = fdopen(from[0], "r");
	return pid;
}

/* One vmmctl call; its exit code, its seconds in *secs, its output in out. */
static int vmmctl(const char *ctl, const char *args, double *secs, char *out, size_t cap)
{
	char cmd[512];
	double t0 = now_ms();
	size_t n = 0;
	FILE *p;
	int rc;

	snprintf(cmd, sizeof(cmd), "%s --json --timeout 60 %s 2>&1", ctl, args);
	if (!(p = popen(cmd, "r")))
		return -1;
	n = fread(out, 1, cap - 1, p);
	out[n] = '\0';
	rc = pclose(p);
	*secs = (now_ms() - t0) / 1e3;
	return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

/* The importer's part of a group sleep's JSON (its member entry), or "" when not found. */
static void member_of(const char *json, pid_t pid, char *out, size_t cap)
{
	char key[48];
	const char *at, *end;

	snprintf(key, sizeof(key), "{\"pid\": %d,", (int)pid);
	out[0] = '\0';
	if (!(at = strstr(json, key)) || !(end = strstr(at, "}}")))
		return;
	snprintf(out, cap, "%.*s", (int)(end - at + 2), at);
}

static int orchestrate(const char *kind, const char *mib, const char *ctl)
{
	bool shim = dlsym(RTLD_DEFAULT, "vmmshim_sleep") != NULL;
	size_t n = (size_t)atol(mib) << 20;
	static char json[65536];
	char buf[160] = "", line[128], arg[160], args[96], part[512];
	FILE *ein, *eout, *iin, *iout;
	int sv[2], fd = -1, fails = 0;
	size_t nfds = 0;
	pid_t e, i;
	double secs;

	signal(SIGPIPE, SIG_IGN); /* a child gone shows as a missing answer */
	if (!n || (strcmp(kind, "vmm") && strcmp(kind, "ipc")))
		return fprintf(stderr, "usage: share_kill vmm|ipc MIB VMMCTL\n"), 2;
	if (socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv))
		return 2;
	snprintf(arg, sizeof(arg), "%d", sv[1]);
	e = spawn((char *[]){ "share_kill", "export", (char *)kind, (char *)mib, arg, NULL },
		  &ein, &eout);
	close(sv[1]);
	if (e < 0 || fd_pass_recv(sv[0], buf, sizeof(buf) - 1, &fd, 1, &nfds,
				  fd_pass_now_ms() + WAIT_MS) <= 0) {
		printf("FAIL the exporter did not share its memory within %d s\n", WAIT_MS / 1000);
		return 2;
	}
	if (!strcmp(kind, "vmm")) {
		if (!nfds)
			return printf("FAIL no descriptor came\n"), 2;
		int keep = dup(fd); /* fd_pass_recv's is close-on-exec: the importer inherits this */

		close(fd);
		fd = keep;
		snprintf(arg, sizeof(arg), "%d", fd);
	} else {
		snprintf(arg, sizeof(arg), "%s", buf);
	}
	i = spawn((char *[]){ "share_kill", "import", (char *)kind, (char *)mib, arg, NULL },
		  &iin, &iout);
	if (fd >= 0)
		close(fd);
	if (i < 0 || !fgets(line, sizeof(line), iout))
		return printf("FAIL the importer did not start\n"), 2;
	printf("RESULT %s import of %s MiB: %s", kind, mib, line);
	if (strncmp(line, "imported ", 9)) {
		kill(e, SIGKILL);
		waitpid(e, NULL, 0);
		waitpid(i, NULL, 0);
		return 1;
	}
	if (shim) {
		snprintf(args, sizeof(args), "sleep %d %d", (int)e, (int)i);
		int rc = vmmctl(ctl, args, &secs, json, sizeof(json));

		member_of(json, i, part, sizeof(part));
		printf("GROUP sleep_rc %d seconds %.3f importer %s\n", rc, secs, part);
		/* The shared memory must have been released with the group: an importer that
		 * kept it mapped would keep its bytes without the copy this row is about. */
		if (rc || !part[0] || strstr(part, "\"imported\": 0,")) {
			printf("FAIL the group sleep did not release the shared memory: %.900s\n",
			       json);
			fails++;
		}
	}
	kill(e, SIGKILL);
	waitpid(e, NULL, 0);
	if (shim) {
		snprintf(args, sizeof(args), "wake %d", (int)i);
		int rc = vmmctl(ctl, args, &secs, json, sizeof(json));

		printf("GROUP wake_rc %d seconds %.3f\n", rc, secs);
		fails += rc != 0;
	}
	fprintf(iin, "verify\n");
	fflush(iin);
	if (!fgets(line, sizeof(line), iout))
		return printf("FAIL the importer did not answer\n"), 2;
	printf("RESULT after the exporter was killed: %s", line);
	fails += strcmp(line, "verify same\n") != 0;
	fclose(iin);
	waitpid(i, NULL, 0);
	return fails ? 1 : 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc == 5 && !strcmp(argv[1], "export"))
		return exporter(!strcmp(argv[2], "vmm"), (size_t)atol(argv[3]) << 20,
				atoi(argv[4]));
	if (argc == 5 && !strcmp(argv[1], "import"))
		return importer(!strcmp(argv[2], "vmm"), (size_t)atol(argv[3]) << 20, argv[4]);
	if (argc == 4)
		return orchestrate(argv[1], argv[2], argv[3]);
	fprintf(stderr, "usage: share_kill vmm|ipc MIB VMMCTL\n");
	return 2;
}
