package dev.jnccl.internal;

import jdk.jfr.Category;
import jdk.jfr.DataAmount;
import jdk.jfr.Description;
import jdk.jfr.Event;
import jdk.jfr.Label;
import jdk.jfr.Name;
import jdk.jfr.StackTrace;

/**
 * JFR events of jnccl. When JFR is off (or the event disabled), {@code new}/{@code begin}/
 * {@code commit} are optimised away by the JIT, so they cost nothing on the hot path.
 */
public final class Events {
    private Events() {}

    @Name("jnccl.CommInit")
    @Label("Communicator Init")
    @Category({"jnccl"})
    @Description("Creation of one rank's NCCL communicator, including the wait for the other ranks")
    @StackTrace(false)
    public static final class CommInit extends Event {
        @Label("Rank") public int rank;
        @Label("World Size") public int worldSize;
        @Label("Device") public int device;
        @Label("Backend") public String backend;
        @Label("NCCL Version") public String ncclVersion;
    }

    @Name("jnccl.Transaction")
    @Label("Transaction")
    @Category({"jnccl"})
    @Description("Host-side enqueue of one transaction (duration = host time, not GPU time)")
    @StackTrace(false)
    public static final class Transaction extends Event {
        @Label("Rank") public int rank;
        @Label("Sequence") public long sequence;
        @Label("Commands") public int commands;
        @Label("Operations") public String operations;
        @Label("Bytes") @DataAmount public long bytes;
    }

    @Name("jnccl.Abort")
    @Label("Communicator Abort")
    @Category({"jnccl"})
    @Description("A communicator was aborted")
    public static final class Abort extends Event {
        @Label("Rank") public int rank;
        @Label("Reason") public String reason;
    }
}
