/* fatal.h - asserting on programmer errors.  The library stops misuse with a
 * message; tests install a handler that longjmps back and check the message.
 *
 *   EXPECT_FATAL(stmt, "ag_add", "[2,3]")     message holds every string
 *   EXPECT_FATAL_AT(stmt, "ag_add")           ... and names this file's line
 */
#ifndef AG_FATAL_H
#define AG_FATAL_H

#include "attngrad.h"
#include "check.h"

#include <setjmp.h>
#include <stdio.h>
#include <string.h>

static jmp_buf fatal_jump;
static char fatal_msg[1024];

static inline void catch_fatal(const char *msg) {
    snprintf(fatal_msg, sizeof fatal_msg, "%s", msg);
    longjmp(fatal_jump, 1);
}

#define EXPECT_FATAL(stmt, ...)                                                                    \
    do {                                                                                           \
        fatal_msg[0] = 0;                                                                          \
        ag_fatal_handler old_ = ag_set_fatal_handler(catch_fatal);                                 \
        if (!setjmp(fatal_jump)) {                                                                 \
            stmt;                                                                                  \
            CHECK(0, "expected a fatal error from %s", #stmt);                                     \
        }                                                                                          \
        ag_set_fatal_handler(old_);                                                                \
        const char *want_[] = {__VA_ARGS__};                                                       \
        for (size_t i_ = 0; i_ < sizeof want_ / sizeof *want_; i_++)                               \
            CHECK(strstr(fatal_msg, want_[i_]), "%s: message \"%s\" lacks \"%s\"", #stmt, fatal_msg, \
                  want_[i_]);                                                                      \
    } while (0)

/* The call-site macros put the caller's __FILE__:line into the message. */
#define EXPECT_FATAL_AT(stmt, ...) EXPECT_FATAL(stmt, __VA_ARGS__, __FILE__ ":")

#endif
