/* One logging sink for core/ and shim/. Silent until the shim sets a level (VMMSHIM_LOG).
 * Each event is one line on stderr: "vmmshim[pid] level: message". */
#ifndef VMM_LOG_H
#define VMM_LOG_H

typedef enum vmm_log_level {
	VMM_LOG_OFF = 0,
	VMM_LOG_ERROR,
	VMM_LOG_WARN,
	VMM_LOG_INFO,
	VMM_LOG_DEBUG,
} vmm_log_level;

void vmm_log_set_level(vmm_log_level level);
vmm_log_level vmm_log_get_level(void);
void vmm_log(vmm_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define vmm_log_enabled(lvl) (vmm_log_get_level() >= (lvl))

#endif
