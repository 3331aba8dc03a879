/* memra/memra.h: the whole public API of libmemra. */
#ifndef MEMRA_MEMRA_H
#define MEMRA_MEMRA_H

#include "memra/arm.h"
#include "memra/digest.h"
#include "memra/gguf.h"
#include "memra/model.h"
#include "memra/numeric.h"
#include "memra/options.h"
#include "memra/plugin.h"
#include "memra/ext.h"
#include "memra/registry.h"
#include "memra/runtime.h"
#include "memra/status.h"
#include "memra/synth.h"
#include "memra/utf8.h"
#include "memra/fileio.h"
#include "memra/version.h"

#endif
