/* test_fileio.c: memra/fileio.h. Each test has a negative control: the same check run against a
 * naive implementation (plain stdio, a write without undo) or a deliberately broken file must
 * fail, so a check that can never fail is caught. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "memra/fileio.h"
#include "test_files.h"

static char g_tmp[256];

static void tmp_setup(void) { tmp_dir_make(g_tmp, sizeof g_tmp, NULL, "fileio"); }

static void tmp_teardown(void) { tmp_dir_remove(g_tmp); }

TestSuite(fileio, .init = tmp_setup, .fini = tmp_teardown);

static char *tmp_path(const char *name) { return tmp_dir_path(g_tmp, name); }

/* The whole file, NUL-terminated; *n its size. */
static char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "cannot read %s", path);
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    cr_assert_not_null(buf);
    for (;;) {
        if (len + 4096 + 1 > cap) {
            cap *= 2;
            buf = realloc(buf, cap);
            cr_assert_not_null(buf);
        }
        size_t r = fread(buf + len, 1, 4096, f);
        len += r;
        if (r == 0)
            break;
    }
    fclose(f);
    buf[len] = '\0';
    if (n)
        *n = len;
    return buf;
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "cannot write %s", path);
    fputs(text, f);
    cr_assert_eq(fclose(f), 0);
}

static int entries_in(const char *dir) {
    DIR *d = opendir(dir);
    cr_assert_not_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, ".."))
            n++;
    closedir(d);
    return n;
}

/* Runs fn in a child process; returns its exit status (or 128 + signal). */
static int in_child(int (*fn)(void *), void *arg) {
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0)
        _exit(fn(arg));
    int ws = 0;
    cr_assert_eq(waitpid(pid, &ws, 0), pid);
    if (WIFSIGNALED(ws))
        return 128 + WTERMSIG(ws);
    return WEXITSTATUS(ws);
}

/* ---- two processes appending to one file ---------------------------------------------------- */

#define LINES_PER_WRITER 2000
#define LINE_PAD 120

/* One record line: "w<writer> <seq> <pad of the writer's letter>\n". */
static size_t make_line(char *buf, size_t size, int writer, int seq) {
    int k = snprintf(buf, size, "w%d %05d ", writer, seq);
    for (int i = 0; i < LINE_PAD; i++)
        buf[k++] = (char)('a' + writer);
    buf[k++] = '\n';
    buf[k] = '\0';
    return (size_t)k;
}

/* 0 when the file holds exactly LINES_PER_WRITER whole lines of each writer, each writer's in
 * order; else the number of the first bad line (1-based) or -1 for a missing line. */
static long check_lines(const char *text) {
    int next[2] = {0, 0};
    long lineno = 0;
    const char *p = text;
    while (*p) {
        lineno++;
        const char *nl = strchr(p, '\n');
        if (!nl)
            return lineno;
        int writer = -1, seq = -1, used = 0;
        if (sscanf(p, "w%d %d %n", &writer, &seq, &used) != 2 || writer < 0 || writer > 1 || seq != next[writer])
            return lineno;
        char want[256];
        size_t wn = make_line(want, sizeof want, writer, seq);
        if ((size_t)(nl + 1 - p) != wn || memcmp(p, want, wn) != 0)
            return lineno;
        next[writer]++;
        p = nl + 1;
    }
    if (next[0] != LINES_PER_WRITER || next[1] != LINES_PER_WRITER)
        return -1;
    return 0;
}

typedef enum { WRITE_APPEND_LINE, WRITE_STDIO_CHUNKS } write_mode;

static void writer_run(const char *path, int writer, write_mode mode, int go_fd) {
    char c;
    if (read(go_fd, &c, 1) != 1) /* start together */
        _exit(10);
    char line[256];
    if (mode == WRITE_APPEND_LINE) {
        int fd = open(path, O_WRONLY | O_APPEND | O_CREAT, 0644);
        if (fd < 0)
            _exit(11);
        for (int i = 0; i < LINES_PER_WRITER; i++) {
            size_t n = make_line(line, sizeof line, writer, i);
            memra_error err = {0};
            if (memra_append_line(fd, path, line, n, &err) != MEMRA_OK)
                _exit(12);
        }
        _exit(close(fd) == 0 ? 0 : 13);
    }
    /* The control: an unlocked stdio stream writing each line in small pieces. */
    FILE *f = fopen(path, "a");
    if (!f)
        _exit(11);
    setvbuf(f, NULL, _IONBF, 0);
    for (int i = 0; i < LINES_PER_WRITER; i++) {
        size_t n = make_line(line, sizeof line, writer, i);
        for (size_t off = 0; off < n; off += 8) {
            size_t k = n - off < 8 ? n - off : 8;
            fprintf(f, "%.*s", (int)k, line + off);
        }
    }
    _exit(fclose(f) == 0 ? 0 : 13);
}

/* Two writers at once, the file checked afterwards: check_lines' result. */
static long two_writers(const char *path, write_mode mode) {
    unlink(path);
    int go[2];
    cr_assert_eq(pipe(go), 0);
    fflush(NULL);
    pid_t pids[2];
    for (int w = 0; w < 2; w++) {
        pids[w] = fork();
        cr_assert_neq(pids[w], -1);
        if (pids[w] == 0) {
            close(go[1]);
            writer_run(path, w, mode, go[0]);
        }
    }
    close(go[0]);
    cr_assert_eq(write(go[1], "gg", 2), 2);
    close(go[1]);
    for (int w = 0; w < 2; w++) {
        int ws = 0;
        cr_assert_eq(waitpid(pids[w], &ws, 0), pids[w]);
        cr_assert(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "writer %d failed (%d)", w, ws);
    }
    char *text = slurp(path, NULL);
    long bad = check_lines(text);
    free(text);
    return bad;
}

Test(fileio, two_processes_append_whole_lines) {
    const char *path = tmp_path("records.jsonl");
    long bad = two_writers(path, WRITE_APPEND_LINE);
    cr_assert_eq(bad, 0, "line %ld is torn, interleaved or missing", bad);
}

Test(fileio, control_unlocked_stdio_chunks_corrupt_lines) {
    /* The same two writers through plain unbuffered stdio in 8-byte pieces: the checker must see
     * the damage (a few tries, since an interleaving depends on the scheduler). */
    const char *path = tmp_path("records.jsonl");
    long bad = 0;
    for (int attempt = 0; attempt < 5 && bad == 0; attempt++)
        bad = two_writers(path, WRITE_STDIO_CHUNKS);
    cr_assert_neq(bad, 0, "unlocked chunked writes never interleaved: the check cannot fail");
}

Test(fileio, control_checker_catches_a_torn_line) {
    /* Deterministic: a file with one line glued onto half of another is refused by the checker. */
    size_t cap = (size_t)2 * LINES_PER_WRITER * 256;
    char *text = malloc(cap), line[256];
    cr_assert_not_null(text);
    size_t len = 0;
    for (int i = 0; i < LINES_PER_WRITER; i++)
        for (int w = 0; w < 2; w++) {
            size_t n = make_line(line, sizeof line, w, i);
            memcpy(text + len, line, n);
            len += n;
        }
    text[len] = '\0';
    cr_assert_eq(check_lines(text), 0, "the checker refuses a good file");
    /* Cut the newline of line 10: it glues onto line 11. */
    char *p = text;
    for (int i = 0; i < 9; i++)
        p = strchr(p, '\n') + 1;
    *strchr(p, '\n') = 'x';
    cr_assert_eq(check_lines(text), 10);
    free(text);
}

Test(fileio, append_refuses_a_line_without_newline_or_a_file_without_o_append) {
    const char *path = tmp_path("r.jsonl");
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT, 0644);
    cr_assert_geq(fd, 0);
    memra_error err = {0};
    cr_assert_eq(memra_append_line(fd, path, "abc", 3, &err), MEMRA_E_INVALID);
    cr_assert_eq(memra_append_line(fd, path, "abc\n", 4, &err), MEMRA_OK);
    close(fd);
    /* Without O_APPEND a second writer would overwrite lines: refused. */
    fd = open(path, O_WRONLY);
    cr_assert_geq(fd, 0);
    cr_assert_eq(memra_append_line(fd, path, "xyz\n", 4, &err), MEMRA_E_INVALID);
    cr_assert(strstr(err.msg, "O_APPEND"), "%s", err.msg);
    close(fd);
    char *t = slurp(path, NULL);
    cr_assert_str_eq(t, "abc\n");
    free(t);
}

/* ---- a short write leaves the file as it was --------------------------------------------------- */

#define PREFIX_TEXT "{\"record\":\"protocol\"}\n"
#define FSIZE_LIMIT 100

struct short_write {
    const char *path;
    bool naive;
    char msg[MEMRA_ERROR_MSG_MAX];
};

/* In a child: the file size limit just above what the file holds, SIGXFSZ ignored, then a line
 * of 200 bytes appended: the kernel writes part of it and refuses the rest (EFBIG). */
static int short_write_child(void *arg) {
    struct short_write *sw = arg;
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl = {FSIZE_LIMIT, FSIZE_LIMIT};
    if (setrlimit(RLIMIT_FSIZE, &rl) != 0)
        return 20;
    int fd = open(sw->path, O_WRONLY | O_APPEND);
    if (fd < 0)
        return 21;
    char line[201];
    memset(line, 'z', 199);
    line[199] = '\n';
    line[200] = '\0';
    if (sw->naive) {
        /* The control: a write loop that does not undo its partial write. */
        size_t done = 0;
        while (done < 200) {
            ssize_t w = write(fd, line + done, 200 - done);
            if (w <= 0)
                return 1;
            done += (size_t)w;
        }
        return 0;
    }
    memra_error err = {0};
    memra_status st = memra_append_line(fd, sw->path, line, 200, &err);
    if (st != MEMRA_E_IO)
        return 2;
    /* The message names the file and the errno's text. */
    if (!strstr(err.msg, sw->path) || !strstr(err.msg, strerror(EFBIG)))
        return 3;
    return 0;
}

Test(fileio, short_write_leaves_the_file_as_it_was) {
    struct short_write sw = {.path = tmp_path("r.jsonl")};
    write_text(sw.path, PREFIX_TEXT);
    cr_assert_eq(in_child(short_write_child, &sw), 0);
    char *t = slurp(sw.path, NULL);
    cr_assert_str_eq(t, PREFIX_TEXT, "a failed append left bytes behind");
    free(t);
    /* The file is still good for the next writer. */
    int fd = open(sw.path, O_WRONLY | O_APPEND);
    memra_error err = {0};
    cr_assert_eq(memra_append_line(fd, sw.path, "next\n", 5, &err), MEMRA_OK, "%s", err.msg);
    close(fd);
    t = slurp(sw.path, NULL);
    cr_assert_str_eq(t, PREFIX_TEXT "next\n");
    free(t);
}

Test(fileio, control_naive_short_write_leaves_a_partial_line) {
    struct short_write sw = {.path = tmp_path("r.jsonl"), .naive = true};
    write_text(sw.path, PREFIX_TEXT);
    cr_assert_eq(in_child(short_write_child, &sw), 1, "the naive write did not fail: no short write happened");
    size_t n = 0;
    char *t = slurp(sw.path, &n);
    cr_assert_eq(n, FSIZE_LIMIT, "the limit did not cut the write where expected");
    cr_assert_neq(t[n - 1], '\n', "the naive write left no partial line: the test cannot tell");
    free(t);
}

Test(fileio, append_to_dev_full_fails_naming_it) {
    int fd = open("/dev/full", O_WRONLY | O_APPEND);
    cr_assert_geq(fd, 0);
    memra_error err = {0};
    cr_assert_eq(memra_append_line(fd, "/dev/full", "x\n", 2, &err), MEMRA_E_IO);
    cr_assert(strstr(err.msg, "/dev/full") && strstr(err.msg, strerror(ENOSPC)), "%s", err.msg);
    close(fd);
}

/* ---- closing streams ---------------------------------------------------------------------------- */

Test(fileio, close_stream_on_dev_full_fails) {
    FILE *f = fopen("/dev/full", "w");
    cr_assert_not_null(f);
    fputs("a table that never reaches the disk\n", f);
    memra_error err = {0};
    cr_assert_eq(memra_close_stream(f, "/dev/full", &err), MEMRA_E_IO);
    cr_assert(strstr(err.msg, "/dev/full"), "%s", err.msg);
    cr_assert(strstr(err.msg, strerror(ENOSPC)), "%s", err.msg);
}

Test(fileio, close_stream_reports_an_earlier_failed_write) {
    /* A write that already failed and was flushed: the final flush succeeds (nothing left), the
     * error flag remains. */
    FILE *f = fopen("/dev/full", "w");
    cr_assert_not_null(f);
    setvbuf(f, NULL, _IONBF, 0);
    fputs("x\n", f);
    cr_assert(ferror(f));
    memra_error err = {0};
    cr_assert_eq(memra_close_stream(f, "/dev/full", &err), MEMRA_E_IO);
    cr_assert(strstr(err.msg, "/dev/full"), "%s", err.msg);
}

Test(fileio, control_close_stream_on_a_regular_file_succeeds) {
    const char *path = tmp_path("ok.txt");
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs("fine\n", f);
    memra_error err = {0};
    cr_assert_eq(memra_close_stream(f, path, &err), MEMRA_OK, "%s", err.msg);
}

static int closed_stdout_child(void *arg) {
    (void)arg;
    close(STDOUT_FILENO);
    fputs("lost\n", stdout);
    memra_error err = {0};
    if (memra_close_stream(stdout, "stdout", &err) != MEMRA_E_IO)
        return 1;
    return strstr(err.msg, "stdout") && strstr(err.msg, strerror(EBADF)) ? 0 : 2;
}

Test(fileio, close_stream_on_closed_stdout_fails) { cr_assert_eq(in_child(closed_stdout_child, NULL), 0); }

/* ---- a private file renamed into place ---------------------------------------------------------- */

Test(fileio, atomic_file_appears_only_at_commit) {
    const char *path = tmp_path("logits.bin");
    memra_atomic_file *af = NULL;
    FILE *f = NULL;
    memra_error err = {0};
    cr_assert_eq(memra_atomic_open(path, &af, &f, &err), MEMRA_OK, "%s", err.msg);
    const char *tmp = memra_atomic_temp_path(af);
    cr_assert(strncmp(tmp, path, strlen(path)) == 0 && strstr(tmp, ".tmp."), "%s", tmp);
    fputs("payload\n", f);
    cr_assert_eq(access(path, F_OK), -1, "the target exists before commit");
    cr_assert_eq(access(tmp, F_OK), 0);
    cr_assert_eq(memra_atomic_commit(af, &err), MEMRA_OK, "%s", err.msg);
    char *t = slurp(path, NULL);
    cr_assert_str_eq(t, "payload\n");
    free(t);
    cr_assert_eq(entries_in(g_tmp), 1, "the private file was left behind");
}

Test(fileio, atomic_abort_leaves_nothing_and_keeps_the_old_file) {
    const char *path = tmp_path("logits.bin");
    memra_atomic_file *af = NULL;
    FILE *f = NULL;
    memra_error err = {0};
    cr_assert_eq(memra_atomic_open(path, &af, &f, &err), MEMRA_OK, "%s", err.msg);
    fputs("half", f);
    memra_atomic_abort(af);
    cr_assert_eq(entries_in(g_tmp), 0);
    memra_atomic_abort(NULL);
    /* An existing file is untouched by an aborted rewrite. */
    write_text(path, "old\n");
    cr_assert_eq(memra_atomic_open(path, &af, &f, &err), MEMRA_OK, "%s", err.msg);
    fputs("new", f);
    memra_atomic_abort(af);
    char *t = slurp(path, NULL);
    cr_assert_str_eq(t, "old\n");
    free(t);
    cr_assert_eq(entries_in(g_tmp), 1);
}

struct failed_commit {
    const char *path;
    bool naive;
};

static int failed_commit_child(void *arg) {
    struct failed_commit *fc = arg;
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl = {4096, 4096};
    if (setrlimit(RLIMIT_FSIZE, &rl) != 0)
        return 20;
    char block[1024];
    memset(block, 'q', sizeof block);
    if (fc->naive) {
        /* The control: writing the target directly, errors unchecked. */
        FILE *f = fopen(fc->path, "w");
        if (!f)
            return 21;
        for (int i = 0; i < 16; i++)
            fwrite(block, 1, sizeof block, f);
        fclose(f);
        return 0;
    }
    memra_atomic_file *af = NULL;
    FILE *f = NULL;
    memra_error err = {0};
    if (memra_atomic_open(fc->path, &af, &f, &err) != MEMRA_OK)
        return 21;
    for (int i = 0; i < 16; i++)
        fwrite(block, 1, sizeof block, f);
    if (memra_atomic_commit(af, &err) != MEMRA_E_IO)
        return 1;
    return strstr(err.msg, fc->path) && strstr(err.msg, strerror(EFBIG)) ? 0 : 2;
}

Test(fileio, atomic_failed_commit_leaves_neither_file) {
    struct failed_commit fc = {.path = tmp_path("out.gguf")};
    cr_assert_eq(in_child(failed_commit_child, &fc), 0);
    cr_assert_eq(entries_in(g_tmp), 0, "a failed commit left a file behind");
}

Test(fileio, control_naive_write_leaves_a_partial_target) {
    struct failed_commit fc = {.path = tmp_path("out.gguf"), .naive = true};
    cr_assert_eq(in_child(failed_commit_child, &fc), 0);
    cr_assert_eq(entries_in(g_tmp), 1, "the naive write left nothing: the test cannot tell");
    struct stat sb;
    cr_assert_eq(stat(fc.path, &sb), 0);
    cr_assert_eq(sb.st_size, 4096);
}

/* ---- inputs that must be regular files ---------------------------------------------------------- */

Test(fileio, check_regular_input_refuses_a_fifo_without_blocking, .timeout = 5) {
    const char *path = tmp_path("prompt.fifo");
    cr_assert_eq(mkfifo(path, 0644), 0);
    memra_error err = {0};
    cr_assert_eq(memra_check_regular_input(path, "prompt ids file", &err), MEMRA_E_IO);
    cr_assert(strstr(err.msg, path) && strstr(err.msg, "FIFO") && strstr(err.msg, "prompt ids file"), "%s", err.msg);
}

Test(fileio, check_regular_input_refuses_devices_and_directories) {
    memra_error err = {0};
    cr_assert_eq(memra_check_regular_input("/dev/null", "model", &err), MEMRA_E_IO);
    cr_assert(strstr(err.msg, "/dev/null") && strstr(err.msg, "device"), "%s", err.msg);
    cr_assert_eq(memra_check_regular_input(g_tmp, "model", &err), MEMRA_E_IO);
    cr_assert(strstr(err.msg, g_tmp) && strstr(err.msg, "directory"), "%s", err.msg);
    const char *missing = tmp_path("missing.gguf");
    cr_assert_eq(memra_check_regular_input(missing, "model", &err), MEMRA_E_IO);
    cr_assert(strstr(err.msg, "cannot open: No such file or directory"), "%s", err.msg);
}

Test(fileio, control_check_regular_input_accepts_a_file_and_a_link_to_one) {
    const char *path = tmp_path("prompt.txt");
    write_text(path, "hi\n");
    memra_error err = {0};
    cr_assert_eq(memra_check_regular_input(path, "prompt", &err), MEMRA_OK, "%s", err.msg);
    const char *link = tmp_path("link.txt");
    cr_assert_eq(symlink(path, link), 0);
    cr_assert_eq(memra_check_regular_input(link, "prompt", &err), MEMRA_OK, "%s", err.msg);
}

/* ---- same file ----------------------------------------------------------------------------------- */

Test(fileio, same_file_sees_links_and_spellings) {
    const char *x = tmp_path("x");
    write_text(x, "x\n");
    const char *hard = tmp_path("hard");
    const char *soft = tmp_path("soft");
    cr_assert_eq(link(x, hard), 0);
    cr_assert_eq(symlink(x, soft), 0);
    bool same = false;
    memra_error err = {0};
    cr_assert_eq(memra_same_file(x, hard, &same, &err), MEMRA_OK);
    cr_assert(same, "hard link");
    same = false;
    cr_assert_eq(memra_same_file(soft, x, &same, &err), MEMRA_OK);
    cr_assert(same, "symlink");
    cr_assert_eq(chdir(g_tmp), 0);
    same = false;
    cr_assert_eq(memra_same_file("./x", "x", &same, &err), MEMRA_OK);
    cr_assert(same, "./x vs x");
    same = false;
    cr_assert_eq(memra_same_file("x", x, &same, &err), MEMRA_OK);
    cr_assert(same, "relative vs absolute");
}

Test(fileio, control_same_file_tells_files_apart) {
    const char *x = tmp_path("x");
    const char *y = tmp_path("y");
    write_text(x, "same bytes\n");
    write_text(y, "same bytes\n");
    bool same = true;
    memra_error err = {0};
    cr_assert_eq(memra_same_file(x, y, &same, &err), MEMRA_OK);
    cr_assert_not(same, "two files with the same bytes");
    same = true;
    cr_assert_eq(memra_same_file(x, tmp_path("missing"), &same, &err), MEMRA_OK);
    cr_assert_not(same, "a missing file");
    same = true;
    cr_assert_eq(memra_same_file(tmp_path("missing"), tmp_path("missing"), &same, &err), MEMRA_OK);
    cr_assert_not(same, "two missing files");
}

/* ---- memory available ---------------------------------------------------------------------------- */

Test(fileio, memory_available_is_positive) {
    uint64_t bytes = 0;
    char how[256];
    memra_error err = {0};
    cr_assert_eq(memra_memory_available(&bytes, how, sizeof how, &err), MEMRA_OK, "%s", err.msg);
    cr_assert_gt(bytes, 0);
    cr_assert_neq(how[0], '\0');
    cr_assert_eq(memra_memory_available(&bytes, NULL, 0, &err), MEMRA_OK, "%s", err.msg);
}

#define AS_HEADROOM (64ull << 20)

static uint64_t vm_size(void) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f)
        return 0;
    char line[256];
    unsigned long long kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmSize: %llu kB", &kb) == 1)
            break;
    fclose(f);
    return (uint64_t)kb * 1024u;
}

static int rlimit_as_child(void *arg) {
    uint64_t *unlimited = arg;
    uint64_t used = vm_size();
    if (used == 0)
        return 20;
    struct rlimit rl = {(rlim_t)(used + AS_HEADROOM), (rlim_t)(used + AS_HEADROOM)};
    if (setrlimit(RLIMIT_AS, &rl) != 0)
        return 21;
    uint64_t bytes = 0;
    char how[256];
    memra_error err = {0};
    if (memra_memory_available(&bytes, how, sizeof how, &err) != MEMRA_OK)
        return 22;
    /* A little slack for what the call itself mapped. */
    if (bytes == 0 || bytes > AS_HEADROOM)
        return 1;
    if (!strstr(how, "RLIMIT_AS"))
        return 2;
    /* The control: without the limit the answer was larger, so the limit is what moved it. */
    return *unlimited > bytes ? 0 : 3;
}

Test(fileio, memory_available_respects_rlimit_as) {
    uint64_t unlimited = 0;
    memra_error err = {0};
    cr_assert_eq(memra_memory_available(&unlimited, NULL, 0, &err), MEMRA_OK, "%s", err.msg);
    if (unlimited <= AS_HEADROOM)
        cr_skip_test("this machine has less than 64 MiB available: the RLIMIT_AS check cannot tell");
    cr_assert_eq(in_child(rlimit_as_child, &unlimited), 0);
}

/* ---- memory available: a cgroup limit, set on a parent of the process's cgroup ----------------- */

#define CG_LIMIT (256ull << 20)

/* The folder of this process's cgroup v1 memory controller, or "" when there is none. */
static void cgroup_v1_memory_dir(char *out, size_t size) {
    out[0] = '\0';
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (!f)
        return;
    char line[1024];
    while (fgets(line, sizeof line, f)) {
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2)
            continue;
        *c2 = '\0';
        bool memory = false;
        for (char *tok = strtok(c1 + 1, ","); tok; tok = strtok(NULL, ","))
            memory |= strcmp(tok, "memory") == 0;
        if (!memory)
            continue;
        c2[1 + strcspn(c2 + 1, "\n")] = '\0';
        snprintf(out, size, "/sys/fs/cgroup/memory%s", c2 + 1);
        break;
    }
    fclose(f);
}

static bool write_value(const char *dir, const char *file, const char *value) {
    char path[2 * PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    FILE *f = fopen(path, "w");
    if (!f)
        return false;
    fputs(value, f);
    return fclose(f) == 0;
}

struct cg_child {
    const char *inner;
    const char *outer;
};

static int cgroup_child(void *arg) {
    struct cg_child *c = arg;
    char pid[32];
    snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    if (!write_value(c->inner, "cgroup.procs", pid))
        return 20;
    uint64_t bytes = 0;
    char how[512];
    memra_error err = {0};
    if (memra_memory_available(&bytes, how, sizeof how, &err) != MEMRA_OK)
        return 21;
    if (bytes == 0 || bytes > CG_LIMIT)
        return 1;
    /* The limit sits on the outer folder: the walk up from the process's own found it. */
    return strstr(how, "cgroup") && strstr(how, c->outer) && !strstr(how, c->inner) ? 0 : 2;
}

Test(fileio, memory_available_respects_a_parent_cgroup_limit) {
    uint64_t unlimited = 0;
    memra_error err = {0};
    cr_assert_eq(memra_memory_available(&unlimited, NULL, 0, &err), MEMRA_OK, "%s", err.msg);
    if (unlimited <= CG_LIMIT)
        cr_skip_test("less than 256 MiB available: a 256 MiB cgroup limit cannot be told apart");
    char base[PATH_MAX];
    cgroup_v1_memory_dir(base, sizeof base);
    char outer[PATH_MAX + 64], inner[PATH_MAX + 128];
    snprintf(outer, sizeof outer, "%s/memra-fileio-%ld", base, (long)getpid());
    snprintf(inner, sizeof inner, "%s/inner", outer);
    if (!base[0] || mkdir(outer, 0755) != 0)
        cr_skip_test("no cgroup v1 memory controller this process may create a group in");
    bool made_inner = mkdir(inner, 0755) == 0;
    char limit[32];
    snprintf(limit, sizeof limit, "%llu\n", CG_LIMIT);
    int rc = -1;
    if (made_inner && write_value(outer, "memory.limit_in_bytes", limit)) {
        struct cg_child c = {.inner = inner, .outer = outer};
        rc = in_child(cgroup_child, &c);
    }
    if (made_inner)
        rmdir(inner);
    rmdir(outer);
    if (rc == -1 || rc == 20)
        cr_skip_test("cannot set a limit or join the group");
    cr_assert_eq(rc, 0, "child result %d (1: above the limit, 2: another bound won)", rc);
}
