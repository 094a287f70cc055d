/*
 * abi_check.c - proves that jnccl_abi.h / jnccl_api.h describe the same ABI as
 * the real cuda_runtime_api.h (CUDA 13) and nccl.h (2.28).
 *
 * Built by `make abi-check` with -I<cuda>/include -I<nccl> only when those
 * headers exist. The emulation's header is included in its "check" mode, where
 * every name carries the prefix jnabi_, so both definitions coexist:
 *   - every enumerator value the emulation uses is compared (_Static_assert),
 *   - every struct size and field offset/size is compared,
 *   - jnccl_api.h is then included after the real headers: it re-declares all
 *     70 CUDA and NCCL functions with the real types, so any signature difference
 *     is a "conflicting types" compile error,
 *   - main() compares the two special stream handles (pointer constants that
 *     cannot be compared at compile time).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#define JNCCL_ABI_CHECK 1
#include "jnccl_abi.h"

#define SAME(x) _Static_assert((long long)(x) == (long long)(jnabi_##x), #x " differs from the real header")
#define SAME_MACRO(ours, real) _Static_assert((long long)(ours) == (long long)(real), #ours " != " #real)
#define SAME_SIZE(ours, real) _Static_assert(sizeof(ours) == sizeof(real), "sizeof(" #ours ") differs")
#define SAME_FIELD(ours, real, f)                                                             \
  _Static_assert(offsetof(ours, f) == offsetof(real, f), "offset of " #real "." #f " differs"); \
  _Static_assert(sizeof(((ours *)0)->f) == sizeof(((real *)0)->f), "size of " #real "." #f " differs")

/* ------------------------------------------------------------ CUDA runtime */
SAME_MACRO(JNCCL_CUDART_VERSION, CUDART_VERSION);

SAME_SIZE(jnabi_cudaError_t, cudaError_t);
SAME(cudaSuccess);
SAME(cudaErrorInvalidValue);
SAME(cudaErrorMemoryAllocation);
SAME(cudaErrorInitializationError);
SAME(cudaErrorInvalidDevicePointer);
SAME(cudaErrorInvalidMemcpyDirection);
SAME(cudaErrorNoDevice);
SAME(cudaErrorInvalidDevice);
SAME(cudaErrorPeerAccessUnsupported);
SAME(cudaErrorInvalidResourceHandle);
SAME(cudaErrorIllegalState);
SAME(cudaErrorNotReady);
SAME(cudaErrorPeerAccessAlreadyEnabled);
SAME(cudaErrorPeerAccessNotEnabled);
SAME(cudaErrorLaunchFailure);
SAME(cudaErrorNotPermitted);
SAME(cudaErrorNotSupported);
SAME(cudaErrorStreamCaptureUnsupported);
SAME(cudaErrorStreamCaptureInvalidated);
SAME(cudaErrorStreamCaptureMerge);
SAME(cudaErrorStreamCaptureUnmatched);
SAME(cudaErrorStreamCaptureUnjoined);
SAME(cudaErrorStreamCaptureIsolation);
SAME(cudaErrorStreamCaptureImplicit);
SAME(cudaErrorCapturedEvent);
SAME(cudaErrorStreamCaptureWrongThread);
SAME(cudaErrorTimeout);
SAME(cudaErrorGraphExecUpdateFailure);
SAME(cudaErrorUnknown);

SAME_SIZE(enum jnabi_cudaMemcpyKind, enum cudaMemcpyKind);
SAME(cudaMemcpyHostToHost);
SAME(cudaMemcpyHostToDevice);
SAME(cudaMemcpyDeviceToHost);
SAME(cudaMemcpyDeviceToDevice);
SAME(cudaMemcpyDefault);

SAME_SIZE(enum jnabi_cudaMemoryType, enum cudaMemoryType);
SAME(cudaMemoryTypeUnregistered);
SAME(cudaMemoryTypeHost);
SAME(cudaMemoryTypeDevice);
SAME(cudaMemoryTypeManaged);

SAME_SIZE(struct jnabi_cudaPointerAttributes, struct cudaPointerAttributes);
SAME_FIELD(struct jnabi_cudaPointerAttributes, struct cudaPointerAttributes, type);
SAME_FIELD(struct jnabi_cudaPointerAttributes, struct cudaPointerAttributes, device);
SAME_FIELD(struct jnabi_cudaPointerAttributes, struct cudaPointerAttributes, devicePointer);
SAME_FIELD(struct jnabi_cudaPointerAttributes, struct cudaPointerAttributes, hostPointer);
SAME_FIELD(struct jnabi_cudaPointerAttributes, struct cudaPointerAttributes, reserved);

SAME_SIZE(jnabi_cudaStream_t, cudaStream_t);
SAME_SIZE(jnabi_cudaEvent_t, cudaEvent_t);
SAME_SIZE(jnabi_cudaGraph_t, cudaGraph_t);
SAME_SIZE(jnabi_cudaGraphExec_t, cudaGraphExec_t);
SAME_SIZE(jnabi_cudaHostFn_t, cudaHostFn_t);

SAME_SIZE(enum jnabi_cudaStreamCaptureMode, enum cudaStreamCaptureMode);
SAME(cudaStreamCaptureModeGlobal);
SAME(cudaStreamCaptureModeThreadLocal);
SAME(cudaStreamCaptureModeRelaxed);
SAME_MACRO(JN_cudaStreamCaptureModeGlobal, cudaStreamCaptureModeGlobal);
SAME_MACRO(JN_cudaStreamCaptureModeThreadLocal, cudaStreamCaptureModeThreadLocal);
SAME_MACRO(JN_cudaStreamCaptureModeRelaxed, cudaStreamCaptureModeRelaxed);
SAME_SIZE(enum jnabi_cudaStreamCaptureStatus, enum cudaStreamCaptureStatus);
SAME(cudaStreamCaptureStatusNone);
SAME(cudaStreamCaptureStatusActive);
SAME(cudaStreamCaptureStatusInvalidated);
SAME_MACRO(JN_cudaGraphInstantiateFlagAutoFreeOnLaunch, cudaGraphInstantiateFlagAutoFreeOnLaunch);
SAME_MACRO(JN_cudaGraphInstantiateFlagUpload, cudaGraphInstantiateFlagUpload);
SAME_MACRO(JN_cudaGraphInstantiateFlagDeviceLaunch, cudaGraphInstantiateFlagDeviceLaunch);
SAME_MACRO(JN_cudaGraphInstantiateFlagUseNodePriority, cudaGraphInstantiateFlagUseNodePriority);
SAME_MACRO(JN_cudaEventRecordDefault, cudaEventRecordDefault);
SAME_MACRO(JN_cudaEventRecordExternal, cudaEventRecordExternal);

SAME_MACRO(JN_cudaStreamDefault, cudaStreamDefault);
SAME_MACRO(JN_cudaStreamNonBlocking, cudaStreamNonBlocking);
SAME_MACRO(JN_cudaEventDefault, cudaEventDefault);
SAME_MACRO(JN_cudaEventBlockingSync, cudaEventBlockingSync);
SAME_MACRO(JN_cudaEventDisableTiming, cudaEventDisableTiming);
SAME_MACRO(JN_cudaEventInterprocess, cudaEventInterprocess);
SAME_MACRO(JN_cudaEventWaitDefault, cudaEventWaitDefault);
SAME_MACRO(JN_cudaEventWaitExternal, cudaEventWaitExternal);
SAME_MACRO(JN_cudaPeerAccessDefault, cudaPeerAccessDefault);

/* -------------------------------------------------------------------- NCCL */
SAME_MACRO(JNCCL_NCCL_VERSION_CODE, NCCL_VERSION_CODE);
SAME_MACRO(JN_NCCL_UNIQUE_ID_BYTES, NCCL_UNIQUE_ID_BYTES);
SAME_MACRO(JN_NCCL_SPLIT_NOCOLOR, NCCL_SPLIT_NOCOLOR);
SAME_MACRO(JN_NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT);
#ifdef NCCL_SHRINK_ABORT /* nccl.h 2.27+ */
SAME_MACRO(JN_NCCL_SHRINK_DEFAULT, NCCL_SHRINK_DEFAULT);
SAME_MACRO(JN_NCCL_SHRINK_ABORT, NCCL_SHRINK_ABORT);
#endif

SAME_SIZE(jnabi_ncclUniqueId, ncclUniqueId);
SAME_FIELD(jnabi_ncclUniqueId, ncclUniqueId, internal);
SAME_SIZE(jnabi_ncclComm_t, ncclComm_t);

SAME_SIZE(jnabi_ncclResult_t, ncclResult_t);
SAME(ncclSuccess);
SAME(ncclUnhandledCudaError);
SAME(ncclSystemError);
SAME(ncclInternalError);
SAME(ncclInvalidArgument);
SAME(ncclInvalidUsage);
SAME(ncclRemoteError);
SAME(ncclInProgress);
SAME(ncclNumResults);

SAME_SIZE(jnabi_ncclRedOp_t, ncclRedOp_t);
SAME(ncclSum);
SAME(ncclProd);
SAME(ncclMax);
SAME(ncclMin);
SAME(ncclAvg);
SAME(ncclScalarDevice);
SAME(ncclScalarHostImmediate);
SAME(ncclNumOps);
SAME(ncclMaxRedOp);

SAME_SIZE(jnabi_ncclDataType_t, ncclDataType_t);
SAME(ncclInt8);
SAME(ncclChar);
SAME(ncclUint8);
SAME(ncclInt32);
SAME(ncclInt);
SAME(ncclUint32);
SAME(ncclInt64);
SAME(ncclUint64);
SAME(ncclFloat16);
SAME(ncclHalf);
SAME(ncclFloat32);
SAME(ncclFloat);
SAME(ncclFloat64);
SAME(ncclDouble);
SAME(ncclBfloat16);
SAME(ncclFloat8e4m3);
SAME(ncclFloat8e5m2);
SAME(ncclNumTypes);

SAME_SIZE(jnabi_ncclConfig_t, ncclConfig_t);
SAME_FIELD(jnabi_ncclConfig_t, ncclConfig_t, size);
SAME_FIELD(jnabi_ncclConfig_t, ncclConfig_t, magic);
SAME_FIELD(jnabi_ncclConfig_t, ncclConfig_t, version);
SAME_FIELD(jnabi_ncclConfig_t, ncclConfig_t, blocking);
SAME_FIELD(jnabi_ncclConfig_t, ncclConfig_t, cgaClusterSize);
SAME_FIELD(jnabi_ncclConfig_t, ncclConfig_t, minCTAs);
SAME_FIELD(jnabi_ncclConfig_t, ncclConfig_t, maxCTAs);
SAME_FIELD(jnabi_ncclConfig_t, ncclConfig_t, netName);
SAME_FIELD(jnabi_ncclConfig_t, ncclConfig_t, splitShare);
SAME_FIELD(jnabi_ncclConfig_t, ncclConfig_t, trafficClass);
SAME_FIELD(jnabi_ncclConfig_t, ncclConfig_t, commName);
SAME_FIELD(jnabi_ncclConfig_t, ncclConfig_t, collnetEnable);
SAME_FIELD(jnabi_ncclConfig_t, ncclConfig_t, CTAPolicy);
SAME_FIELD(jnabi_ncclConfig_t, ncclConfig_t, shrinkShare);
SAME_FIELD(jnabi_ncclConfig_t, ncclConfig_t, nvlsCTAs);
SAME_FIELD(jnabi_ncclConfig_t, ncclConfig_t, nChannelsPerNetPeer);
SAME_FIELD(jnabi_ncclConfig_t, ncclConfig_t, nvlinkCentricSched);

/* The config initializer's magic and version, as NCCL_CONFIG_INITIALIZER writes them. */
static const ncclConfig_t real_initializer = NCCL_CONFIG_INITIALIZER;

/* ------------------------------------------- every exported signature */
#include "jnccl_api.h"

int main(void) {
  int bad = 0;
  if ((void *)cudaStreamLegacy != JN_cudaStreamLegacy) bad |= puts("cudaStreamLegacy differs") > 0;
  if ((void *)cudaStreamPerThread != JN_cudaStreamPerThread) bad |= puts("cudaStreamPerThread differs") > 0;
  if (real_initializer.magic != JN_NCCL_CONFIG_MAGIC) bad |= puts("config magic differs") > 0;
  if (real_initializer.version != JNCCL_NCCL_VERSION_CODE) bad |= puts("config version differs") > 0;
  if (real_initializer.size != sizeof(jnabi_ncclConfig_t)) bad |= puts("config size differs") > 0;
  puts(bad ? "abi-check: FAILED" : "abi-check: jnccl_abi.h matches nccl.h and cuda_runtime_api.h");
  return bad;
}
