/* memra/memra.h: the whole public API of libmemra, the core (what a plugin builds against). The
 * other two libraries have their own headers: libmemra-model memra/gguf.h, memra/model.h,
 * memra/quant.h, memra/runtime.h, memra/synth.h; libmemra-text memra/tokenizer.h, memra/chat.h. */
#ifndef MEMRA_MEMRA_H
#define MEMRA_MEMRA_H

#include "memra/arm.h"
#include "memra/digest.h"
#include "memra/model_types.h"
#include "memra/numeric.h"
#include "memra/options.h"
#include "memra/plugin.h"
#include "memra/ext.h"
#include "memra/registry.h"
#include "memra/status.h"
#include "memra/tensor_type.h"
#include "memra/utf8.h"
#include "memra/fileio.h"
#include "memra/version.h"

#endif
