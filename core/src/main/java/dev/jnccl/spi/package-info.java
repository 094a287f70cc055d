/**
 * The seam between {@link dev.jnccl.Communicator} and the launchers (modes), exported only to the
 * launcher modules. A launcher supplies, per rank, {@link dev.jnccl.spi.RankParts}: a
 * {@link dev.jnccl.spi.HostSide} (how the ranks meet on the host: barrier, host gathers, the parts
 * of a split) and a {@link dev.jnccl.spi.Transport} (how each {@link dev.jnccl.spi.Command} moves:
 * NCCL, or threads mode's copy engines), both required; optionally {@link dev.jnccl.spi.RankEvents}
 * (what it does when the communicator is attached, paced, split and closed) and
 * {@link dev.jnccl.spi.Failures} (how a failure of one rank reaches the others). It gets the
 * communicator from {@link dev.jnccl.spi.Modes#communicator}. The communicator is composed from
 * these parts, never subclassed, as PyTorch's {@code ProcessGroup} delegates each collective to a
 * {@code Backend}.
 */
package dev.jnccl.spi;
