/* io-private.h: what the safetensors reader and writer share. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "em-io.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors data is little-endian; a big-endian host needs byte swapping here"
#endif

/* A safetensors dtype: its name, element size, and the em_dtype it maps
 * to (-1: none). */
typedef struct {
  const char *name;
  int size;
  int dtype;
} em_st_dtype;

/* NULL when the name is not a safetensors dtype. */
const em_st_dtype *em_st_dtype_find(const char *name);
/* The safetensors name of an em_dtype ("F32", ...). */
const char *em_st_dtype_name(em_dtype dt);

/* The largest header we accept, as the reference implementation does. */
#define EM_ST_MAX_HEADER ((uint64_t)100 << 20)
/* The most entries (tensors and metadata) a header may list, and JSON
 * items (keys and values) in all: a model's file has thousands at most,
 * and the JSON tree of a 100 MiB header of 1.75 million empty tensors
 * took 2 GB and 30 s to build. A tensor entry is about 10 items. */
#define EM_ST_MAX_ENTRIES 65536
#define EM_ST_MAX_ITEMS (1 << 20)
