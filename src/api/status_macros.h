#pragma once

#include "dsa_topk/dsa_topk.h"

// Returns the Status of `expr` from the enclosing function unless it is ok.
#define DSA_RETURN_IF_ERROR(expr)        \
  do {                                   \
    ::dsa::Status dsa_status_ = (expr);  \
    if (!dsa_status_.ok()) return dsa_status_; \
  } while (0)
