/* The logging sink: one prefixed line per event, written with a single write(2) so that lines
 * from several threads never interleave. */
#include "log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <unistd.h>

static _Atomic int log_level = VMM_LOG_OFF;

void vmm_log_set_level(vmm_log_level level)
{
	atomic_store(&log_level, (int)level);
}

vmm_log_level vmm_log_get_level(void)
{
	return (vmm_log_level)atomic_load_explicit(&log_level, memory_order_relaxed);
}

void vmm_log(vmm_log_level level, const char *fmt, ...)
{
	static const char *const names[] = { "off", "error", "warn", "info", "debug" };
	char line[1024];
	va_list ap;
	int n;

	if (level == VMM_LOG_OFF || vmm_log_get_level() < level)
		return;
	n = snprintf(line, sizeof(line), "vmmshim[%d] %s: ", (int)getpid(), names[level]);
	va_start(ap, fmt);
	n += vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
	va_end(ap);
	if (n > (int)sizeof(line) - 2)
		n = (int)sizeof(line) - 2;
	line[n++] = '\n';
	(void)!write(STDERR_FILENO, line, (size_t)n);
}
