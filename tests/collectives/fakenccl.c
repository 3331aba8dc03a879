/* fakenccl.c: a test-only stand-in for libnccl (tests/collectives): it exports ncclGetVersion
 * returning FAKE_VERSION and nothing else, so the nccl collective's version check (an old
 * release) and its symbol lookup (a new release missing the rest) can be seen without NCCL. */
#ifndef FAKE_VERSION
#error "FAKE_VERSION must be defined"
#endif

__attribute__((visibility("default"))) int ncclGetVersion(int *version);

int ncclGetVersion(int *version) {
    *version = FAKE_VERSION;
    return 0;
}
