/* model_types.c: the helpers of memra/model_types.h that plugins compute with (building a
 * description from a GGUF file is model/src/model.c). */
#include <math.h>

#include "memra/model_types.h"

memra_status memra_weight_check_type(const memra_weight *w, memra_error *err) {
    if (memra_tensor_type_supported(w->type))
        return MEMRA_OK;
    return memra_fail(err, MEMRA_E_UNSUPPORTED, "tensor '%s' has type %s, which memra does not support yet",
                      w->name ? w->name : "(unnamed)", memra_tensor_type_name(w->type));
}

float memra_model_rope_freq(const memra_model *m, uint32_t i) {
    double f = pow((double)m->rope_freq_base, -2.0 * (double)i / (double)m->head_dim);
    if (m->rope_freqs)
        f /= (double)m->rope_freqs[i];
    return (float)f;
}

bool memra_model_layer_is_swa(const memra_model *m, uint32_t il) {
    return m->sliding_window > 0 && m->swa_period > 0 && il % m->swa_period != m->swa_period - 1;
}

float memra_model_layer_rope_freq(const memra_model *m, uint32_t il, uint32_t i) {
    if (!memra_model_layer_is_swa(m, il))
        return memra_model_rope_freq(m, i);
    return (float)pow((double)m->rope_freq_base_swa, -2.0 * (double)i / (double)m->head_dim);
}

float memra_model_layer_rope_linear_factor(const memra_model *m, uint32_t il) {
    return memra_model_layer_is_swa(m, il) ? 1.0f : m->rope_linear_factor;
}
