/* test_gate_layers.c: memra-gate's files call one another in layers (gate.h): gates/layers.sh, run
 * on the gate's object files, finds no call back up and no circle within a layer; and it does
 * find one where there is (a negative control: the top's object file named as the bottom's). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "test_files.h"

/* GATE_OBJECTS: the gate's object files, ':'-separated (CMake). Runs layers.sh on them, with
 * every object named `from` copied into dir as `to` first when from is not NULL; the script's
 * exit status and output. */
static int layers(const char *from, const char *to, const char *dir, char *out, size_t size) {
    char cmd[16384], objs[] = GATE_OBJECTS;
    int k = snprintf(cmd, sizeof cmd, "sh '%s/layers.sh'", GATES_DIR);
    for (char *o = strtok(objs, ":"); o; o = strtok(NULL, ":")) {
        const char *use = o;
        if (from && strstr(o, from)) {
            char copy[8192];
            snprintf(copy, sizeof copy, "cp '%s' '%s'", o, tmp_dir_path(dir, to));
            cr_assert_eq(system(copy), 0, "%s", copy);
            use = tmp_dir_path(dir, to);
        } else if (from && strstr(o, to))
            continue; /* the file the copy stands for */
        k += snprintf(cmd + k, sizeof cmd - (size_t)k, " '%s'", use);
        cr_assert_lt((size_t)k, sizeof cmd);
    }
    snprintf(cmd + k, sizeof cmd - (size_t)k, " 2>&1");
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p, "popen %s", cmd);
    size_t n = fread(out, 1, size - 1, p);
    out[n] = '\0';
    int st = pclose(p);
    cr_assert(WIFEXITED(st), "layers.sh did not exit: %s", out);
    return WEXITSTATUS(st);
}

Test(gate_layers, no_gate_file_calls_back_up) {
    static char out[65536];
    int rc = layers(NULL, NULL, NULL, out, sizeof out);
    cr_assert_eq(rc, 0, "a call back up or a circle:\n%s", out);
    /* the graph was read: main calls the cli, the passes call the records, all call the bottom */
    cr_assert(strstr(out, "gate_main(0) -> gate_cli(1)"), "%s", out);
    cr_assert(strstr(out, "gate_run(2) -> gate_records(5)"), "%s", out);
    cr_assert(strstr(out, "gate_pass(3) -> gate_stop(6): gate_check_stop"), "%s", out);
    cr_assert(!strstr(out, " UP") && !strstr(out, "CIRCLE"), "%s", out);
}

Test(gate_layers, a_call_back_up_is_found) {
    static char out[65536];
    char dir[256];
    tmp_dir_make(dir, sizeof dir, NULL, "layers");
    /* main's object standing for the bottom's: the bottom would call the cli, the passes... */
    int rc = layers("gate_main.c.o", "gate_stop.c.o", dir, out, sizeof out);
    cr_assert_eq(tmp_dir_remove(dir), 0);
    cr_assert_eq(rc, 1, "layers.sh passed a call back up:\n%s", out);
    cr_assert(strstr(out, "gate_stop(6) -> gate_cli(1): gate_cli_help gate_cli_parse  UP"), "%s", out);
}
