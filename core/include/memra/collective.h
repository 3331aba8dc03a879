/* memra/collective.h: a collective plugin's communicator as tools and checks use it, through the
 * core, never through the vtable (the arm layer does the same for backends). A handle is the
 * plugin (found through the registry by name) and, once created, one communicator of device or
 * host ranks driven from this process. Every call checks the handle and says in its message when
 * the collective lacks an optional member (epochs, refusal cells, abort). */
#ifndef MEMRA_COLLECTIVE_H
#define MEMRA_COLLECTIVE_H

#include <stddef.h>
#include <stdint.h>

#include "memra/plugin.h"
#include "memra/registry.h"
#include "memra/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct memra_coll memra_coll;

/* Loads the collective plugin `name` (the registry's error when there is none or it does not
 * load; MEMRA_E_PLUGIN when it has no usable all-reduce). No communicator yet. */
memra_status memra_coll_open(memra_registry *r, const char *name, memra_coll **out, memra_error *err);
/* The collective's own keys (its option specs) and its name. */
const memra_option_spec *memra_coll_options(const memra_coll *c, uint32_t *n);
const char *memra_coll_name(const memra_coll *c);
/* Creates the communicator over n_ranks ranks on devices (the plugin's create; one per handle). */
memra_status memra_coll_create(memra_coll *c, uint32_t n_ranks, const int32_t *devices, const memra_options *opts,
                               memra_error *err);
/* The vtable's calls on the communicator (memra/plugin.h says what each does). */
memra_status memra_coll_all_reduce(memra_coll *c, uint32_t rank, float *buf, size_t count, void *stream, uint32_t block,
                                   const int32_t *position_dev, int32_t *status_dev, memra_error *err);
/* MEMRA_E_UNSUPPORTED when the collective counts no epochs. */
memra_status memra_coll_epochs(memra_coll *c, uint32_t rank, uint64_t *out, uint32_t n_blocks, memra_error *err);
/* Aborts the communicator (nothing when the collective has no abort). */
void memra_coll_abort(memra_coll *c);
/* Destroys the communicator, if any, and frees the handle. NULL is fine. */
void memra_coll_close(memra_coll *c);

#ifdef __cplusplus
}
#endif
#endif
