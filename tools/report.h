/* report.h: one self-contained HTML page from memra's JSON-line records (`memra report`,
 * `memra-gate --html`). The page has no script and fetches nothing (no external URL at all): its
 * charts are inline SVG, its style is inline, with a print stylesheet. It is made from the
 * records alone (nothing of the machine that renders it, no clock), so a record file from another
 * machine renders the same page.
 *
 * Records: a gate runs from its `protocol` record to its `verdict` (or `interrupted`) record
 * (gates/RECORDS.md); a verdict without a protocol is a run that stopped before its arms opened;
 * `bench` records (memra bench --jsonl) are shown together. Unknown record kinds are listed with
 * their line, never dropped. Every line must be a JSON object with a string member "record": any
 * other line is malformed (REPORT_MALFORMED, naming the line), except a last line without its
 * newline that stops too soon (in the middle of a value: the beginning of some JSON text), which
 * is a truncated line: said in the page and in diag. A complete last line that is no record is
 * malformed like any other. */
#ifndef MEMRA_TOOLS_REPORT_H
#define MEMRA_TOOLS_REPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum report_status { REPORT_OK = 0, REPORT_MALFORMED, REPORT_NOMEM } report_status;

typedef struct report_diag {
    char error[600];     /* REPORT_MALFORMED: "line N: why" */
    uint64_t error_line; /* its line (1-based) */
    bool truncated;      /* the last line was cut short (no newline, does not parse) */
    uint64_t truncated_line;
    char truncated_why[400];
    uint64_t records;       /* lines read as records */
    uint32_t gates;         /* gates found */
    uint32_t failing_gates; /* of them, without a passing verdict */
    uint32_t bench;         /* bench records */
    uint32_t unknown;       /* records of an unknown kind */
} report_diag;

/* Renders the records in data[0..len) as an HTML page to out. `source` names them in the page (a
 * file name). Writes nothing on REPORT_MALFORMED or REPORT_NOMEM (the records are all read before
 * the first byte is written); write errors are out's (the caller checks them). */
report_status report_render(FILE *out, const char *source, const char *data, size_t len, report_diag *diag);

#endif
