/* A program without a CUDA driver that probes for one with dlsym, as plugin loaders do. The shim
 * exports driver names itself; the probe must still find nothing. */
#include <dlfcn.h>
#include <stdio.h>

int main(void)
{
	printf("cuMemAlloc_v2 %s, cuGetProcAddress_v2 %s, aclrtMalloc %s, cuInit %s\n",
	       dlsym(RTLD_DEFAULT, "cuMemAlloc_v2") ? "found" : "absent",
	       dlsym(RTLD_DEFAULT, "cuGetProcAddress_v2") ? "found" : "absent",
	       dlsym(RTLD_DEFAULT, "aclrtMalloc") ? "found" : "absent",
	       dlsym(RTLD_DEFAULT, "cuInit") ? "found" : "absent");
	return 0;
}
