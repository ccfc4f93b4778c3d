/* device-private.h: what the files of engine/device share: the backend
 * interface (em-backend.h), which has a header of its own now that the
 * engine outside this folder uses it. */
#pragma once

#include "em-backend.h"
