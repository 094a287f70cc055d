/*
 * jnccl_api.h - prototypes of every function libjnccl_host.so exports.
 *
 * The names and signatures are those of cuda_runtime_api.h (CUDA 13) and
 * nccl.h (2.28.3). Only the type names are used here, so abi_check.c can
 * include this file after the real headers: any signature that differs from
 * the real one is then a compile error ("conflicting types").
 */
#ifndef JNCCL_API_H
#define JNCCL_API_H

#ifndef JNCCL_API
#define JNCCL_API __attribute__((visibility("default")))
#endif

/* ---------------------------------------------------------------- cudart -- */
JNCCL_API cudaError_t cudaRuntimeGetVersion(int *runtimeVersion);
JNCCL_API cudaError_t cudaDriverGetVersion(int *driverVersion);
JNCCL_API cudaError_t cudaGetDeviceCount(int *count);
JNCCL_API cudaError_t cudaSetDevice(int device);
JNCCL_API cudaError_t cudaGetDevice(int *device);
JNCCL_API cudaError_t cudaDeviceSynchronize(void);
JNCCL_API cudaError_t cudaDeviceCanAccessPeer(int *canAccessPeer, int device, int peerDevice);
JNCCL_API cudaError_t cudaDeviceEnablePeerAccess(int peerDevice, unsigned int flags);
JNCCL_API cudaError_t cudaDeviceGetPCIBusId(char *pciBusId, int len, int device);
JNCCL_API cudaError_t cudaMalloc(void **devPtr, size_t size);
JNCCL_API cudaError_t cudaFree(void *devPtr);
JNCCL_API cudaError_t cudaMallocHost(void **ptr, size_t size);
JNCCL_API cudaError_t cudaFreeHost(void *ptr);
JNCCL_API cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind);
JNCCL_API cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
                                      cudaStream_t stream);
JNCCL_API cudaError_t cudaMemcpyPeerAsync(void *dst, int dstDevice, const void *src, int srcDevice, size_t count,
                                          cudaStream_t stream);
JNCCL_API cudaError_t cudaMemsetAsync(void *devPtr, int value, size_t count, cudaStream_t stream);
JNCCL_API cudaError_t cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags);
JNCCL_API cudaError_t cudaStreamDestroy(cudaStream_t stream);
JNCCL_API cudaError_t cudaStreamSynchronize(cudaStream_t stream);
JNCCL_API cudaError_t cudaStreamQuery(cudaStream_t stream);
JNCCL_API cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags);
JNCCL_API cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags);
JNCCL_API cudaError_t cudaEventDestroy(cudaEvent_t event);
JNCCL_API cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream);
JNCCL_API cudaError_t cudaEventSynchronize(cudaEvent_t event);
JNCCL_API cudaError_t cudaEventQuery(cudaEvent_t event);
JNCCL_API cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end);
JNCCL_API cudaError_t cudaGetLastError(void);
JNCCL_API const char *cudaGetErrorString(cudaError_t error);
JNCCL_API cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *attributes, const void *ptr);
JNCCL_API cudaError_t cudaEventRecordWithFlags(cudaEvent_t event, cudaStream_t stream, unsigned int flags);
JNCCL_API cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void *userData);
JNCCL_API cudaError_t cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode);
JNCCL_API cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *pGraph);
JNCCL_API cudaError_t cudaStreamIsCapturing(cudaStream_t stream, enum cudaStreamCaptureStatus *pCaptureStatus);
JNCCL_API cudaError_t cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode *mode);
JNCCL_API cudaError_t cudaGraphInstantiate(cudaGraphExec_t *pGraphExec, cudaGraph_t graph, unsigned long long flags);
JNCCL_API cudaError_t cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream);
JNCCL_API cudaError_t cudaGraphExecDestroy(cudaGraphExec_t graphExec);
JNCCL_API cudaError_t cudaGraphDestroy(cudaGraph_t graph);

/* ------------------------------------------------------------------ nccl -- */
JNCCL_API ncclResult_t ncclGetVersion(int *version);
JNCCL_API ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId);
JNCCL_API ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank);
JNCCL_API ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank,
                                              ncclConfig_t *config);
JNCCL_API ncclResult_t ncclCommInitAll(ncclComm_t *comm, int ndev, const int *devlist);
JNCCL_API ncclResult_t ncclCommFinalize(ncclComm_t comm);
JNCCL_API ncclResult_t ncclCommDestroy(ncclComm_t comm);
JNCCL_API ncclResult_t ncclCommAbort(ncclComm_t comm);
JNCCL_API ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                                     ncclConfig_t *config);
/* Newer than the 2.28.3 ABI the rest copies: ncclCommShrink (2.27), ncclCommRevoke (2.28.7),
 * ncclCommGetUniqueId and ncclCommGrow (2.29.2); signatures of nccl.h 2.30. */
JNCCL_API ncclResult_t ncclCommShrink(ncclComm_t comm, int *excludeRanksList, int excludeRanksCount,
                                      ncclComm_t *newcomm, ncclConfig_t *config, int shrinkFlags);
JNCCL_API ncclResult_t ncclCommRevoke(ncclComm_t comm, int revokeFlags);
JNCCL_API ncclResult_t ncclCommGetUniqueId(ncclComm_t comm, ncclUniqueId *uniqueId);
JNCCL_API ncclResult_t ncclCommGrow(ncclComm_t comm, int nRanks, const ncclUniqueId *uniqueId, int rank,
                                    ncclComm_t *newcomm, ncclConfig_t *config);
JNCCL_API ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError);
JNCCL_API const char *ncclGetErrorString(ncclResult_t result);
JNCCL_API const char *ncclGetLastError(ncclComm_t comm);
JNCCL_API ncclResult_t ncclCommCount(const ncclComm_t comm, int *count);
JNCCL_API ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int *device);
JNCCL_API ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank);
JNCCL_API ncclResult_t ncclCommRegister(const ncclComm_t comm, void *buff, size_t size, void **handle);
JNCCL_API ncclResult_t ncclCommDeregister(const ncclComm_t comm, void *handle);
JNCCL_API ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t *op, void *scalar, ncclDataType_t datatype,
                                                ncclScalarResidence_t residence, ncclComm_t comm);
JNCCL_API ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm);
JNCCL_API ncclResult_t ncclMemAlloc(void **ptr, size_t size);
JNCCL_API ncclResult_t ncclMemFree(void *ptr);
JNCCL_API ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                                     ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
JNCCL_API ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                                         ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                         cudaStream_t stream);
JNCCL_API ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount, ncclDataType_t datatype,
                                     ncclComm_t comm, cudaStream_t stream);
JNCCL_API ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                                     int root, ncclComm_t comm, cudaStream_t stream);
JNCCL_API ncclResult_t ncclReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                                  ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream);
JNCCL_API ncclResult_t ncclAlltoAll(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                                    ncclComm_t comm, cudaStream_t stream);
JNCCL_API ncclResult_t ncclGather(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root,
                                  ncclComm_t comm, cudaStream_t stream);
JNCCL_API ncclResult_t ncclScatter(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                                   int root, ncclComm_t comm, cudaStream_t stream);
JNCCL_API ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer,
                                ncclComm_t comm, cudaStream_t stream);
JNCCL_API ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                                cudaStream_t stream);
JNCCL_API ncclResult_t ncclGroupStart(void);
JNCCL_API ncclResult_t ncclGroupEnd(void);

/* ------------------------------------------------------- the emulation's own -- */
/* NULL when the emulation's environment variables (JNCCL_HOST_*) were valid at its first use;
 * else "NAME=value is not valid: expected ..." (several joined by "; "). The Java loader calls it
 * right after loading the library and refuses to go on with that text. Not part of CUDA or NCCL. */
JNCCL_API const char *jnccl_emu_config_error(void);
/* What a communicator received through ncclConfig_t, with NCCL's defaults applied (minCTAs 1,
 * maxCTAs 64, cgaClusterSize 4, no name) and its caps (CTAs at most 64): lets tests check that a
 * configuration arrived. name (len bytes, len >= 1) gets commName, or "" when none was given.
 * ncclInvalidArgument for a handle that is not a live communicator or a NULL output. Not part of
 * CUDA or NCCL. */
JNCCL_API ncclResult_t jnccl_emu_comm_config(ncclComm_t comm, int *minCTAs, int *maxCTAs, int *cgaClusterSize,
                                             char *name, size_t len);

#endif /* JNCCL_API_H */
