package dev.jnccl;

import dev.jnccl.cuda.CudaEvent;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;

/**
 * The transactions of one communicator: their numbers, the open one (its owner thread, ready event
 * and commands), how recent ones ended, and how many were executed. One transaction is open at a
 * time; its state lives here, not in the handles, so that a transaction allocates nothing per call
 * and a handle used after its transaction ended says so by its number instead of adding to a later
 * one.
 *
 * <p>Opening claims the log for the calling thread with one compare-and-set ({@link #holder}); the
 * holder alone writes the open transaction's state, and ending releases the claim last. No lock:
 * {@code begin} then compiles small enough for C2 to inline it into its callers, where the handle
 * it returns is scalar-replaced ({@code HotPathAllocationTest} tells when that stops being so);
 * opening and ending a transaction only order with each other, and everything native stays under
 * the communicator's native lock.
 */
final class TransactionLog {
    /** How many transaction outcomes are remembered, for the messages of stale handles. */
    private static final int OUTCOMES = 1024;
    private static final VarHandle HOLDER;
    /**
     * The writes that end a transaction ({@link #openNumber}, the claim's release) and {@link #executed}
     * are release stores (made in the pipeline's code, not in {@code begin}'s, which must stay small):
     * other threads read them (volatile reads) only for messages, counts and the next claim, whose
     * compare-and-set orders with them; a full fence per write (a volatile store's) buys them nothing,
     * and the communicator's unlock right after drains the stores anyway.
     */
    private static final VarHandle OPEN_NUMBER;
    private static final VarHandle EXECUTED;

    static {
        try {
            MethodHandles.Lookup lookup = MethodHandles.lookup();
            HOLDER = lookup.findVarHandle(TransactionLog.class, "holder", Thread.class);
            OPEN_NUMBER = lookup.findVarHandle(TransactionLog.class, "openNumber", long.class);
            EXECUTED = lookup.findVarHandle(TransactionLog.class, "executed", long.class);
        } catch (ReflectiveOperationException e) {
            throw new ExceptionInInitializerError(e);
        }
    }

    private final int rank;
    /** Its communicator, for the usability check (a direct call: begin stays small). */
    private final Communicator usable;
    /** The open transaction's commands: one buffer, reused by every transaction. */
    private final CommandBuffer commands = new CommandBuffer();
    /** How recent transactions ended, by number modulo the length: +number executed, -number closed unexecuted. */
    private final long[] outcomes = new long[OUTCOMES];
    /** The thread whose transaction is open (or who takes a replay's number), null when none: the claim. */
    private volatile Thread holder;
    /** The last number given; written by the holder only. */
    private long sequence;
    /**
     * The open transaction's number, 0 when none is open. Written by the holder; volatile so that
     * another thread using a handle gets the right message.
     */
    private volatile long openNumber;
    /** The thread that began the open transaction, kept after it ended for the messages of stale handles. */
    private Thread openOwner;
    /** The event the open transaction's commands wait for. */
    private CudaEvent openReady;
    /** Transactions and replays executed (counted as their enqueue starts): how far this rank got. */
    private volatile long executed;

    TransactionLog(int rank, Communicator usable) {
        this.rank = rank;
        this.usable = usable;
    }

    /** Opens a transaction on the calling thread, its commands to run after {@code ready}; {@return its number} */
    long open(String operation, CudaEvent ready) {
        usable.requireUsable(operation);
        Thread caller = Thread.currentThread();
        if (!HOLDER.compareAndSet(this, null, caller)) {
            throw stillOpen(operation);
        }
        long number = ++sequence;
        commands.clear();
        openReady = ready;
        openOwner = caller;
        openNumber = number; // a plain volatile store: a VarHandle's here would grow begin past inlining
        return number;
    }

    /**
     * {@return the number of a replay, which counts as a transaction}: taken with the log claimed
     * for a moment, so that no transaction is open meanwhile (the caller holds the native lock).
     */
    long nextNumber(String operation) {
        if (!HOLDER.compareAndSet(this, null, Thread.currentThread())) {
            throw stillOpen(operation);
        }
        long number = ++sequence;
        HOLDER.setRelease(this, (Thread) null);
        return number;
    }

    void requireNoneOpen(String operation) {
        if (holder != null) {
            throw stillOpen(operation);
        }
    }

    private IllegalStateException stillOpen(String operation) {
        long open = openNumber;
        return new IllegalStateException(operation + ": transaction #" + (open != 0 ? open : sequence) + " of rank "
                + rank + " is still open; execute or close it first");
    }

    /** {@return the open transaction's number, 0 when none is open} */
    long openNumber() {
        return openNumber;
    }

    /** {@return the event the open transaction's commands wait for} */
    CudaEvent openReady() {
        return openReady;
    }

    /** {@return the open transaction's commands} */
    CommandBuffer commands() {
        return commands;
    }

    /** {@return whether handle {@code number} ({@link Transaction#CURRENT}: the communicator's own) is the open one} */
    boolean isOpen(long number) {
        long open = openNumber;
        return open != 0 && (number == Transaction.CURRENT || number == open);
    }

    /**
     * A command, execute or close through handle {@code number}: its transaction must be the open
     * one, used from the thread that began it, on a usable communicator.
     */
    void requireOpen(String operation, long number) {
        long open = openNumber;
        if (open != 0 && (number == Transaction.CURRENT || number == open)) {
            if (Thread.currentThread() != holder) {
                throw wrongThread(operation, open);
            }
            usable.requireUsable(operation);
            return;
        }
        throw new IllegalStateException(operation + ": transaction #" + number + " of rank " + rank + " "
                + outcome(number));
    }

    private IllegalStateException wrongThread(String operation, long open) {
        return new IllegalStateException(operation + ": transaction #" + open + " of rank " + rank
                + " belongs to thread \"" + openOwner.getName() + "\" that began it; it was used from thread \""
                + Thread.currentThread().getName() + "\"");
    }

    /** {@return how transaction {@code number}, no longer open, ended, as the end of a sentence} */
    String outcome(long number) {
        long outcome = outcomes[(int) (Math.max(number, 0) % OUTCOMES)];
        if (outcome == number) {
            return "was already executed";
        }
        if (outcome == -number) {
            return "was closed without executing";
        }
        return "has ended (executed or closed; transaction #" + sequence + " is the newest)";
    }

    /**
     * Ends the open transaction {@code number} (executed or discarded), if it is still the open one
     * and the calling thread holds it; the claim is released last.
     */
    void ended(long number, boolean executed) {
        if (openNumber == number && holder == Thread.currentThread()) {
            outcomes[(int) (number % OUTCOMES)] = executed ? number : -number;
            openReady = null;
            OPEN_NUMBER.setRelease(this, 0L);
            HOLDER.setRelease(this, (Thread) null);
            // openOwner stays: a handle used from another thread meanwhile may have read the number before.
        }
    }

    /** A handle's close: discards the transaction of handle {@code number} if it is still open; nothing otherwise. */
    void discard(long number) {
        long open = openNumber;
        if (open == 0 || (number != Transaction.CURRENT && number != open)) {
            return;
        }
        if (Thread.currentThread() != holder) {
            throw wrongThread("close", open);
        }
        commands.clear();
        ended(open, false);
    }

    /** Counts a transaction or replay whose enqueue starts (only the thread holding the lock writes it). */
    void countExecuted() {
        EXECUTED.setRelease(this, executed + 1); // one writer: the thread holding the communicator's lock
    }

    /** {@return the transactions and replays executed so far} */
    long executed() {
        return executed;
    }
}
