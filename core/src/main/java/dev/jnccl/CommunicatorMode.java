package dev.jnccl;

/**
 * How a {@link Communicator} drives NCCL: the trade between the host cost of every transaction and
 * what NCCL lets jnccl bound. Chosen with {@link CommunicatorOptions#withMode(CommunicatorMode)};
 * the default is {@link #BLOCKING_SPLIT}.
 *
 * <p>Why it matters: NCCL 2.28 starts a helper thread for every {@code ncclGroupEnd} of a
 * non-blocking communicator once a collective is queued ({@code src/group.cc}), so at world size
 * 2 or more a transaction costs several times what it costs on a blocking communicator (measured
 * on an H200: about 10-12 us blocking, 52-68 us non-blocking). At world size 1 both modes cost
 * the same.
 */
public enum CommunicatorMode {
    /**
     * The default. The communicator is created non-blocking, so that its initialisation is bounded
     * by {@link CommunicatorOptions#initTimeout()} and can be aborted or cancelled; it is then split
     * ({@code ncclCommSplit}, one colour, same ranks, {@code splitShare = 1}) into a blocking child,
     * also within the init deadline, and every transaction and collective runs on that child at
     * blocking speed. Costs: a few milliseconds more at init (the split), and a thread that enqueues
     * work may wait inside NCCL (e.g. while NCCL connects to a peer for the first time); the
     * watchdog and {@link Communicator#abort} still end a hung collective, by aborting both
     * communicators. {@link Communicator#close()} stays bounded by
     * {@link CommunicatorOptions#closeTimeout()}: it waits for the comms stream within the deadline,
     * then finalizes the blocking child (after the stream is idle this only flushes local work, it
     * waits for no peer) and the non-blocking parent against the deadline, and aborts both past it.
     */
    BLOCKING_SPLIT,

    /**
     * One non-blocking communicator for everything: every NCCL call returns at once and jnccl polls
     * for its completion, so init, every enqueue, finalize and abort are bounded and no thread ever
     * waits inside NCCL. Costs: at world size 2 or more, several times the host cost per transaction
     * and collective (NCCL's per-group helper thread, see above).
     */
    NON_BLOCKING
}
