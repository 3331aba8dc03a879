/* collective.c: memra/collective.h, a collective's communicator through the core. */
#include <stdlib.h>
#include <string.h>

#include "memra/collective.h"

struct memra_coll {
    memra_registry *r;
    const memra_plugin *p;
    const memra_collective_vtable *vt;
    memra_collective *comm;
};

memra_status memra_coll_open(memra_registry *r, const char *name, memra_coll **out, memra_error *err) {
    if (!r || !name || !out)
        return memra_fail(err, MEMRA_E_INVALID, "memra_coll_open: a NULL argument");
    *out = NULL;
    const memra_plugin *p = NULL;
    memra_status st = memra_registry_load(r, name, MEMRA_PLUGIN_COLLECTIVE, &p, err);
    if (st != MEMRA_OK)
        return st;
    const memra_collective_vtable *vt = p->collective;
    if (!MEMRA_HAS_MEMBER(vt, memra_collective_vtable, abort) || !vt->create || !vt->destroy || !vt->all_reduce_sum_f32)
        return memra_fail(err, MEMRA_E_PLUGIN, "the collective '%s' has no usable all-reduce", name);
    memra_coll *c = calloc(1, sizeof *c);
    if (!c)
        return memra_fail(err, MEMRA_E_NOMEM, "out of memory");
    c->r = r;
    c->p = p;
    c->vt = vt;
    *out = c;
    return MEMRA_OK;
}

const memra_option_spec *memra_coll_options(const memra_coll *c, uint32_t *n) {
    *n = c && c->vt->options ? c->vt->n_options : 0;
    return c ? c->vt->options : NULL;
}

const char *memra_coll_name(const memra_coll *c) { return c && c->p->name ? c->p->name : ""; }

memra_status memra_coll_create(memra_coll *c, uint32_t n_ranks, const int32_t *devices, const memra_options *opts,
                               memra_error *err) {
    if (!c)
        return memra_fail(err, MEMRA_E_INVALID, "memra_coll_create: the handle is NULL");
    if (c->comm)
        return memra_fail(err, MEMRA_E_INVALID, "%s: a communicator was created already", memra_coll_name(c));
    return c->vt->create(memra_registry_host(c->r), n_ranks, devices, opts, &c->comm, err);
}

static memra_status need_comm(const memra_coll *c, const char *what, memra_error *err) {
    if (!c)
        return memra_fail(err, MEMRA_E_INVALID, "%s: the handle is NULL", what);
    if (!c->comm)
        return memra_fail(err, MEMRA_E_INVALID, "%s: %s has no communicator yet", what, memra_coll_name(c));
    return MEMRA_OK;
}

memra_status memra_coll_all_reduce(memra_coll *c, uint32_t rank, float *buf, size_t count, void *stream, uint32_t block,
                                   const int32_t *position_dev, int32_t *status_dev, memra_error *err) {
    memra_status st = need_comm(c, "memra_coll_all_reduce", err);
    return st ? st : c->vt->all_reduce_sum_f32(c->comm, rank, buf, count, stream, block, position_dev, status_dev, err);
}

memra_status memra_coll_epochs(memra_coll *c, uint32_t rank, uint64_t *out, uint32_t n_blocks, memra_error *err) {
    memra_status st = need_comm(c, "memra_coll_epochs", err);
    if (st)
        return st;
    if (!c->vt->epochs)
        return memra_fail(err, MEMRA_E_UNSUPPORTED, "%s counts no epochs", memra_coll_name(c));
    return c->vt->epochs(c->comm, rank, out, n_blocks, err);
}

void memra_coll_abort(memra_coll *c) {
    if (c && c->comm && c->vt->abort)
        c->vt->abort(c->comm);
}

void memra_coll_close(memra_coll *c) {
    if (!c)
        return;
    if (c->comm)
        c->vt->destroy(c->comm);
    free(c);
}
