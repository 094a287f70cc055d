/*
 * elastic.c - ncclCommShrink, ncclCommRevoke, ncclCommGetUniqueId and ncclCommGrow: the calls
 * that change a communicator's membership (newer than the 2.28.3 ABI the rest copies).
 */
#include "comm.h"

ncclResult_t ncclCommShrink(ncclComm_t comm, int *excludeRanksList, int excludeRanksCount, ncclComm_t *newcomm,
                            ncclConfig_t *config, int shrinkFlags) {
  (void)comm, (void)excludeRanksList, (void)excludeRanksCount, (void)newcomm, (void)config, (void)shrinkFlags;
  return failf(ncclInternalError, "ncclCommShrink : not yet implemented by the host emulation");
}

ncclResult_t ncclCommRevoke(ncclComm_t comm, int revokeFlags) {
  (void)comm, (void)revokeFlags;
  return failf(ncclInternalError, "ncclCommRevoke : not yet implemented by the host emulation");
}

ncclResult_t ncclCommGetUniqueId(ncclComm_t comm, ncclUniqueId *uniqueId) {
  (void)comm, (void)uniqueId;
  return failf(ncclInternalError, "ncclCommGetUniqueId : not yet implemented by the host emulation");
}

ncclResult_t ncclCommGrow(ncclComm_t comm, int nRanks, const ncclUniqueId *uniqueId, int rank, ncclComm_t *newcomm,
                          ncclConfig_t *config) {
  (void)comm, (void)nRanks, (void)uniqueId, (void)rank, (void)newcomm, (void)config;
  return failf(ncclInternalError, "ncclCommGrow : not yet implemented by the host emulation");
}
