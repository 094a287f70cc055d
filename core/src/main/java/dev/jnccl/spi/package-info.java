/**
 * The seam between {@link dev.jnccl.Communicator} and the launchers (modes), exported only to the
 * launcher modules. A launcher supplies, per rank, a {@link dev.jnccl.spi.HostSide} (how the ranks
 * meet on the host: barrier, host gathers, split membership, and how a failure reaches the other
 * ranks) and a {@link dev.jnccl.spi.Transport} (how each {@link dev.jnccl.spi.Command} moves: NCCL,
 * or threads mode's copy engines), and gets the communicator from
 * {@link dev.jnccl.spi.Modes#communicator}. The communicator is composed from these parts, never
 * subclassed, as PyTorch's {@code ProcessGroup} delegates each collective to a {@code Backend}.
 */
package dev.jnccl.spi;
