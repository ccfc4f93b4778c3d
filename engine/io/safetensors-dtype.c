/* safetensors-dtype.c: the dtype names of the safetensors format. */
#include "io-private.h"

#include <string.h>

static const em_st_dtype st_dtypes[] = {
  {"F32", 4, EM_DTYPE_F32},  {"F64", 8, EM_DTYPE_F64},  {"I32", 4, EM_DTYPE_I32},
  {"I64", 8, EM_DTYPE_I64},  {"U8", 1, EM_DTYPE_U8},    {"F16", 2, -1},
  {"BF16", 2, -1},           {"BOOL", 1, -1},           {"I8", 1, -1},
  {"I16", 2, -1},            {"U16", 2, -1},            {"U32", 4, -1},
  {"U64", 8, -1},            {"F8_E4M3", 1, -1},        {"F8_E5M2", 1, -1},
};

const em_st_dtype *em_st_dtype_find(const char *name) {
  for (size_t i = 0; i < sizeof st_dtypes / sizeof st_dtypes[0]; i++)
    if (strcmp(st_dtypes[i].name, name) == 0) return &st_dtypes[i];
  return NULL;
}

const char *em_st_dtype_name(em_dtype dt) {
  for (size_t i = 0; i < sizeof st_dtypes / sizeof st_dtypes[0]; i++)
    if (st_dtypes[i].dtype == (int)dt) return st_dtypes[i].name;
  return NULL;
}
