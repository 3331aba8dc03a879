/* nccl_abi.h: the few NCCL types and entry points the `nccl` collective uses, declared here from
 * NCCL's documented ABI (values as in nccl.h of NCCL 2.18 to 2.28), so that memra neither
 * includes nccl.h nor links libnccl: the library is opened at run time (dlopen) and these
 * functions are looked up by name (dlsym). */
#ifndef MEMRA_NCCL_ABI_H
#define MEMRA_NCCL_ABI_H

#include <limits.h>
#include <stddef.h>

typedef struct ncclComm *ncclComm_t; /* opaque */

#define NCCL_UNIQUE_ID_BYTES 128
typedef struct {
    char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

typedef enum {
    ncclSuccess = 0,
    ncclUnhandledCudaError = 1,
    ncclSystemError = 2,
    ncclInternalError = 3,
    ncclInvalidArgument = 4,
    ncclInvalidUsage = 5,
    ncclRemoteError = 6,
    ncclInProgress = 7
} ncclResult_t;

typedef enum { ncclSum = 0 } ncclRedOp_t;
typedef enum { ncclFloat32 = 7 } ncclDataType_t;

/* ncclConfig_t as NCCL 2.28 lays it out (ncclConfig_v22800). A library of an older release reads
 * only the fields its own version knows (it checks size, magic and version). */
#define NCCL_CONFIG_MAGIC 0xcafebeefu
#define NCCL_CONFIG_UNDEF_INT INT_MIN
typedef struct {
    size_t size;
    unsigned int magic;
    unsigned int version;
    int blocking;
    int cgaClusterSize;
    int minCTAs;
    int maxCTAs;
    const char *netName;
    int splitShare;
    int trafficClass;
    const char *commName;
    int collnetEnable;
    int CTAPolicy;
    int shrinkShare;
    int nvlsCTAs;
    int nChannelsPerNetPeer;
    int nvlinkCentricSched;
} ncclConfig_t;
#define NCCL_CONFIG_VERSION 22800u

/* The version code of a release: major*10000 + minor*100 + patch since 2.9 (2.18.0 is 21800);
 * major*1000 + minor*100 + patch before. */
#define NCCL_MIN_VERSION_CODE 21800

typedef struct nccl_api {
    ncclResult_t (*GetVersion)(int *version);
    ncclResult_t (*GetUniqueId)(ncclUniqueId *id);
    ncclResult_t (*CommInitRankConfig)(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank, ncclConfig_t *config);
    ncclResult_t (*CommFinalize)(ncclComm_t comm);
    ncclResult_t (*CommDestroy)(ncclComm_t comm);
    ncclResult_t (*CommAbort)(ncclComm_t comm);
    ncclResult_t (*CommGetAsyncError)(ncclComm_t comm, ncclResult_t *async_error);
    ncclResult_t (*AllReduce)(const void *send, void *recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                              ncclComm_t comm, void *stream);
    ncclResult_t (*AllGather)(const void *send, void *recv, size_t send_count, ncclDataType_t type, ncclComm_t comm,
                              void *stream);
    ncclResult_t (*GroupStart)(void);
    ncclResult_t (*GroupEnd)(void);
    const char *(*GetErrorString)(ncclResult_t result);
} nccl_api;

#endif
