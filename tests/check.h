/* check.h - the test harness shared by tests/test_*.c.
 *
 * Each test program defines TEST(name) functions and lists them in main()
 * with RUN(name). A CHECK failure prints file:line and the message, marks
 * the current test failed and carries on. At exit the program prints one
 * line "name: N passed, N failed" and returns non-zero if any failed;
 * tests/run.sh adds the lines up. DFLASH_TEST=NAME runs only the tests whose
 * name contains NAME (while working on one). */
#ifndef DFL_CHECK_H
#define DFL_CHECK_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int check_n_pass, check_n_fail, check_cur_failed;
static const char *check_cur_name;

#define CHECK(cond, ...)                                                              \
    do {                                                                              \
        if (!(cond)) {                                                                \
            fprintf(stderr, "  FAIL %s:%d [%s] %s: ", __FILE__, __LINE__,             \
                    check_cur_name, #cond);                                           \
            fprintf(stderr, __VA_ARGS__);                                             \
            fputc('\n', stderr);                                                      \
            check_cur_failed = 1;                                                     \
        }                                                                             \
    } while (0)

#define TEST(name) static void test_##name(void)

#define RUN(name)                                                                     \
    do {                                                                              \
        if (getenv("DFLASH_TEST") && !strstr(#name, getenv("DFLASH_TEST"))) break;    \
        check_cur_name = #name;                                                       \
        check_cur_failed = 0;                                                         \
        test_##name();                                                                \
        if (check_cur_failed) {                                                       \
            check_n_fail++;                                                           \
            fprintf(stderr, "not ok - %s\n", #name);                                  \
        } else {                                                                      \
            check_n_pass++;                                                           \
            fprintf(stderr, "ok - %s\n", #name);                                      \
        }                                                                             \
    } while (0)

#define CHECK_DONE(prog)                                                              \
    do {                                                                              \
        printf("%s: %d passed, %d failed\n", prog, check_n_pass, check_n_fail);       \
        return check_n_fail ? 1 : 0;                                                  \
    } while (0)

#endif
