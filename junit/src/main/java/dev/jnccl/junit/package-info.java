/**
 * Multi-rank JUnit 5 tests: {@link dev.jnccl.junit.MultiRankTest} (worlds, placement, deadline),
 * the per-rank parameters {@link dev.jnccl.Communicator} and {@link dev.jnccl.junit.RankInfo},
 * {@link dev.jnccl.junit.Placement}, and fault injection on the host emulation
 * ({@link dev.jnccl.junit.InjectFault}). docs/testing.md is the guide.
 */
package dev.jnccl.junit;
