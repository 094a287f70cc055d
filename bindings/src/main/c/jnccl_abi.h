/*
 * jnccl_abi.h - the subset of the CUDA runtime (13.0) and NCCL (2.28.3) ABI
 * that the host emulation implements.
 *
 * This header deliberately does not include cuda_runtime_api.h or nccl.h (CI
 * machines have neither). Every value, struct size and field offset below is
 * copied from those headers; bindings/src/test/c/abi_check.c compiles this
 * file next to the real headers and _Static_asserts that they agree.
 *
 * For that check the header can be included with JNCCL_ABI_CHECK defined: all
 * type, tag and enumerator names then get the prefix "jnabi_" (through JNABI)
 * so they do not clash with the real definitions, and the prototypes
 * (jnccl_api.h) are left out; abi_check.c includes jnccl_api.h on its own,
 * after the real headers, so the compiler also checks every signature.
 */
#ifndef JNCCL_ABI_H
#define JNCCL_ABI_H

#include <stddef.h>
#include <limits.h>

#ifdef JNCCL_ABI_CHECK
#define JNABI(x) jnabi_##x
#else
#define JNABI(x) x
#endif

/* ------------------------------------------------------------------ CUDA -- */

#define JNCCL_CUDART_VERSION 13000 /* CUDART_VERSION of the headers */

typedef enum JNABI(cudaError) {
  JNABI(cudaSuccess) = 0,
  JNABI(cudaErrorInvalidValue) = 1,
  JNABI(cudaErrorMemoryAllocation) = 2,
  JNABI(cudaErrorInitializationError) = 3,
  JNABI(cudaErrorInvalidDevicePointer) = 17,
  JNABI(cudaErrorInvalidMemcpyDirection) = 21,
  JNABI(cudaErrorNoDevice) = 100,
  JNABI(cudaErrorInvalidDevice) = 101,
  JNABI(cudaErrorPeerAccessUnsupported) = 217,
  JNABI(cudaErrorInvalidResourceHandle) = 400,
  JNABI(cudaErrorIllegalState) = 401,
  JNABI(cudaErrorNotReady) = 600,
  JNABI(cudaErrorPeerAccessAlreadyEnabled) = 704,
  JNABI(cudaErrorPeerAccessNotEnabled) = 705,
  JNABI(cudaErrorLaunchFailure) = 719,
  JNABI(cudaErrorNotPermitted) = 800,
  JNABI(cudaErrorNotSupported) = 801,
  JNABI(cudaErrorStreamCaptureUnsupported) = 900,
  JNABI(cudaErrorStreamCaptureInvalidated) = 901,
  JNABI(cudaErrorStreamCaptureMerge) = 902,
  JNABI(cudaErrorStreamCaptureUnmatched) = 903,
  JNABI(cudaErrorStreamCaptureUnjoined) = 904,
  JNABI(cudaErrorStreamCaptureIsolation) = 905,
  JNABI(cudaErrorStreamCaptureImplicit) = 906,
  JNABI(cudaErrorCapturedEvent) = 907,
  JNABI(cudaErrorStreamCaptureWrongThread) = 908,
  JNABI(cudaErrorTimeout) = 909,
  JNABI(cudaErrorGraphExecUpdateFailure) = 910,
  JNABI(cudaErrorUnknown) = 999
} JNABI(cudaError_t);

enum JNABI(cudaMemcpyKind) {
  JNABI(cudaMemcpyHostToHost) = 0,
  JNABI(cudaMemcpyHostToDevice) = 1,
  JNABI(cudaMemcpyDeviceToHost) = 2,
  JNABI(cudaMemcpyDeviceToDevice) = 3,
  JNABI(cudaMemcpyDefault) = 4
};

enum JNABI(cudaMemoryType) {
  JNABI(cudaMemoryTypeUnregistered) = 0,
  JNABI(cudaMemoryTypeHost) = 1,
  JNABI(cudaMemoryTypeDevice) = 2,
  JNABI(cudaMemoryTypeManaged) = 3
};

/* struct cudaPointerAttributes of driver_types.h (88 bytes on LP64). */
struct JNABI(cudaPointerAttributes) {
  enum JNABI(cudaMemoryType) type;
  int device;
  void *devicePointer;
  void *hostPointer;
  long reserved[8];
};

/* Opaque handles. The emulation defines these structs privately. */
typedef struct JNABI(CUstream_st) *JNABI(cudaStream_t);
typedef struct JNABI(CUevent_st) *JNABI(cudaEvent_t);

/* Stream capture and graphs (driver_types.h). */
enum JNABI(cudaStreamCaptureMode) {
  JNABI(cudaStreamCaptureModeGlobal) = 0,
  JNABI(cudaStreamCaptureModeThreadLocal) = 1,
  JNABI(cudaStreamCaptureModeRelaxed) = 2
};

enum JNABI(cudaStreamCaptureStatus) {
  JNABI(cudaStreamCaptureStatusNone) = 0,
  JNABI(cudaStreamCaptureStatusActive) = 1,
  JNABI(cudaStreamCaptureStatusInvalidated) = 2
};

typedef struct JNABI(CUgraph_st) *JNABI(cudaGraph_t);
typedef struct JNABI(CUgraphExec_st) *JNABI(cudaGraphExec_t);
typedef void (*JNABI(cudaHostFn_t))(void *userData);

/* The same values as plain integers, for the emulation's own code (the enums above are renamed
 * in the ABI check). */
#define JN_cudaStreamCaptureModeGlobal 0
#define JN_cudaStreamCaptureModeThreadLocal 1
#define JN_cudaStreamCaptureModeRelaxed 2
#define JN_cudaGraphInstantiateFlagAutoFreeOnLaunch 1u
#define JN_cudaGraphInstantiateFlagUpload 2u
#define JN_cudaGraphInstantiateFlagDeviceLaunch 4u
#define JN_cudaGraphInstantiateFlagUseNodePriority 8u
#define JN_cudaEventRecordDefault 0x00u
#define JN_cudaEventRecordExternal 0x01u

/* Flags and special handles (#defines in driver_types.h). */
#define JN_cudaStreamDefault 0x00u
#define JN_cudaStreamNonBlocking 0x01u
#define JN_cudaStreamLegacy ((void *)0x1)
#define JN_cudaStreamPerThread ((void *)0x2)
#define JN_cudaEventDefault 0x00u
#define JN_cudaEventBlockingSync 0x01u
#define JN_cudaEventDisableTiming 0x02u
#define JN_cudaEventInterprocess 0x04u
#define JN_cudaEventWaitDefault 0x00u
#define JN_cudaEventWaitExternal 0x01u
#define JN_cudaPeerAccessDefault 0x00u

/* ------------------------------------------------------------------ NCCL -- */

#define JNCCL_NCCL_VERSION_CODE 22803 /* NCCL_VERSION_CODE of nccl.h 2.28.3 */
#define JN_NCCL_UNIQUE_ID_BYTES 128
#define JN_NCCL_SPLIT_NOCOLOR (-1)
#define JN_NCCL_CONFIG_UNDEF_INT INT_MIN
#define JN_NCCL_SHRINK_DEFAULT 0x00 /* ncclCommShrink's flags (NCCL 2.27+) */
#define JN_NCCL_SHRINK_ABORT 0x01
#define JN_NCCL_CONFIG_MAGIC 0xcafebeefu

typedef struct JNABI(ncclComm) *JNABI(ncclComm_t);

typedef struct {
  char internal[JN_NCCL_UNIQUE_ID_BYTES];
} JNABI(ncclUniqueId);

typedef enum {
  JNABI(ncclSuccess) = 0,
  JNABI(ncclUnhandledCudaError) = 1,
  JNABI(ncclSystemError) = 2,
  JNABI(ncclInternalError) = 3,
  JNABI(ncclInvalidArgument) = 4,
  JNABI(ncclInvalidUsage) = 5,
  JNABI(ncclRemoteError) = 6,
  JNABI(ncclInProgress) = 7,
  JNABI(ncclNumResults) = 8
} JNABI(ncclResult_t);

typedef enum {
  JNABI(ncclSum) = 0,
  JNABI(ncclProd) = 1,
  JNABI(ncclMax) = 2,
  JNABI(ncclMin) = 3,
  JNABI(ncclAvg) = 4,
  JNABI(ncclNumOps) = 5,
  JNABI(ncclMaxRedOp) = 0x7fffffff
} JNABI(ncclRedOp_t);

typedef enum {
  JNABI(ncclInt8) = 0,
  JNABI(ncclChar) = 0,
  JNABI(ncclUint8) = 1,
  JNABI(ncclInt32) = 2,
  JNABI(ncclInt) = 2,
  JNABI(ncclUint32) = 3,
  JNABI(ncclInt64) = 4,
  JNABI(ncclUint64) = 5,
  JNABI(ncclFloat16) = 6,
  JNABI(ncclHalf) = 6,
  JNABI(ncclFloat32) = 7,
  JNABI(ncclFloat) = 7,
  JNABI(ncclFloat64) = 8,
  JNABI(ncclDouble) = 8,
  JNABI(ncclBfloat16) = 9,
  JNABI(ncclFloat8e4m3) = 10,
  JNABI(ncclFloat8e5m2) = 11,
  JNABI(ncclNumTypes) = 12
} JNABI(ncclDataType_t);

/* ncclScalarResidence_t (NCCL 2.11+): where the scalar of ncclRedOpCreatePreMulSum lives. */
typedef enum {
  JNABI(ncclScalarDevice) = 0,
  JNABI(ncclScalarHostImmediate) = 1
} JNABI(ncclScalarResidence_t);

/* ncclConfig_v22800 (80 bytes on LP64). */
typedef struct JNABI(ncclConfig_v22800) {
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
} JNABI(ncclConfig_t);

#ifndef JNCCL_ABI_CHECK
#include "jnccl_api.h"
#endif

#endif /* JNCCL_ABI_H */
