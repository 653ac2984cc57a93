/* Memory held by its mapping alone (cfg.release_on_map). The driver frees a handle's memory once
 * it is both released and unmapped, in either order. A 2 MiB piece the heap maps is released at
 * once, so that giving it back later (a large request gathering free pieces at the program's
 * peak, PROBE.md (l)) is one unmap instead of an unmap and a release. The handle's value stays
 * in its record; whatever needs the handle beyond its mapping (a move, a sleep, an export, a
 * program that retains it) takes a reference again first (cuMemRetainAllocationHandle), and the
 * handle is then as any other. Only the give-back paths unmap a held handle as it is. */
#ifndef VMM_HEAP_HOLD_H
#define VMM_HEAP_HOLD_H

#include "heap_types.h"

/* h was just mapped with its access: release the heap's reference when the setting, the backend
 * and h allow (a 2 MiB piece, neither shared nor retained by the program). A refused release
 * leaves h as it was. */
void hold_by_mapping(struct devheap *dh, struct phandle *h);
/* Take a reference to h again where its mapping alone holds it (nothing otherwise). On failure h
 * stays held by its mapping, and the caller must leave it mapped. */
vmm_status hold_again(struct devheap *dh, struct phandle *h, vmm_error *err);

#endif
