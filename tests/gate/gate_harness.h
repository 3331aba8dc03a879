/* gate_harness.h: runs the built memra-gate as a subprocess and reads its JSON-line records. */
#ifndef MEMRA_TEST_GATE_HARNESS_H
#define MEMRA_TEST_GATE_HARNESS_H

#include <stdbool.h>
#include <stddef.h>

typedef struct gate_result {
    int exit;    /* the exit code; -1 when it did not exit normally, -2 after a sanitizer report */
    char *jsonl; /* the records (--jsonl file), "" when none */
    char *err;   /* what it wrote on stderr */
    char *out;   /* what it wrote on stdout */
} gate_result;

/* Runs memra-gate with args (NULL-terminated), adding --jsonl TMP unless no_jsonl. */
gate_result gate_run(const char *const *args, bool no_jsonl);

/* How gate_run_ex runs it. */
typedef struct gate_how {
    bool no_jsonl;
    const char *stdout_to; /* a path to send stdout to; "" closes it; NULL: captured */
    const char *stderr_to; /* the same for stderr */
    long long rlimit_as;   /* RLIMIT_AS in bytes (0: unchanged) */
    long long rlimit_fsize;
    int timeout_s;           /* SIGKILL after this many seconds (0: 120); the result's exit is then -3 */
    const char *plugin_path; /* MEMRA_PLUGIN_PATH for the child (NULL: unchanged) */
    int signal;              /* sent once the protocol record is in the --jsonl file (0: none) */
    const char *signal_when; /* or once this record kind is there ("step": during the replay) */
    int exit_signal;         /* out: the signal that ended the child, 0 when it exited */
    bool other_files;        /* out: files other than the records were left in the run's folder */
} gate_how;
gate_result gate_run_ex(const char *const *args, gate_how *how);

/* A strict check of one record line: one JSON value (RFC 8259), and valid UTF-8. NULL when it is,
 * else what is wrong (static). */
const char *gate_strict_json(const char *line, size_t n);
void gate_result_free(gate_result *r);

/* The n-th line (from 0) whose record is `record`, copied (free it), or NULL. */
char *gate_record(const char *jsonl, const char *record, int n);
int gate_count_records(const char *jsonl, const char *record);
/* The first value of "key" in a record line: a number, or a string's content (copied into buf). */
bool gate_field_num(const char *line, const char *key, double *out);
bool gate_field_str(const char *line, const char *key, char *buf, size_t size);
bool gate_field_bool(const char *line, const char *key, bool *out);

/* Asserts that memra-gate with args exits 2 (usage) with `message` on stderr, and that it wrote
 * no record (a usage error is no run) and nothing on stdout. */
void gate_expect_usage(const char *const *args, const char *message);

/* A test of suite `suite` that expects a usage error `message` from the given arguments (plus a
 * short run: --prime 4 --gen 4 --rows 0). */
#define GATE_USAGE(suite, name, message, ...)                                                                          \
    Test(suite, name) {                                                                                                \
        const char *args[] = {__VA_ARGS__, "--prime", "4", "--gen", "4", "--rows", "0", NULL};                         \
        gate_expect_usage(args, message);                                                                              \
    }

/* The common small run: --preset tiny --prime 16 --gen 16 --rows 4 --quiet. */
#define GATE_SMALL "--prime", "16", "--gen", "16", "--rows", "4", "--quiet"

#endif
