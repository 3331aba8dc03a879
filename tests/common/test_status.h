/* test_status.h: OK(call), a library call that must return MEMRA_OK; a failed assertion names the
 * call and its message otherwise. The call may use `err` (a memra_error *) for its error. Header-only:
 * every test folder includes tests/common. */
#ifndef MEMRA_TEST_STATUS_H
#define MEMRA_TEST_STATUS_H

#include <criterion/criterion.h>

#include "memra/status.h"

#define OK(call)                                                                                                       \
    do {                                                                                                               \
        memra_error e_ = {0};                                                                                          \
        memra_error *err = &e_;                                                                                        \
        memra_status s_ = (call);                                                                                      \
        cr_assert_eq(s_, MEMRA_OK, "%s failed: %s", #call, e_.msg);                                                    \
    } while (0)

#endif
