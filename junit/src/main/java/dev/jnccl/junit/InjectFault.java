package dev.jnccl.junit;

import java.lang.annotation.Documented;
import java.lang.annotation.ElementType;
import java.lang.annotation.Retention;
import java.lang.annotation.RetentionPolicy;
import java.lang.annotation.Target;

/**
 * Makes one rank of a {@link MultiRankTest} fail, hang or lag, so that a test can check its own
 * failure handling (retry, abort, a watchdog's timeout) without a cluster. It works on the host
 * emulation only (its fault hooks); on real NCCL the test is skipped with the reason.
 *
 * <p>Operations are counted as the emulation counts NCCL's: each collective, send or receive of a
 * rank's communicators is one (a transaction of one collective is one operation; commands that
 * threads mode moves by its copy engines, {@code ThreadsOptions} memcpy switches, are not counted).
 * The fault holds for every communicator created while the invocation runs (splits included,
 * counted by their own ranks). The emulation's hooks are process-wide, so a test with a fault must
 * not run beside other jnccl code of the same JVM: multi-rank tests already run one at a time.
 */
@Target(ElementType.METHOD)
@Retention(RetentionPolicy.RUNTIME)
@Documented
public @interface InjectFault {
    /** What happens to the rank. */
    enum Kind {
        /** Its {@link #at()}-th operation fails (ncclSystemError): its communicator aborts, and with it the pack. */
        FAIL,
        /** Its {@link #at()}-th operation never completes until the communicator is aborted (by a watchdog or the deadline). */
        HANG,
        /** Every operation of the rank is delayed by {@link #lagMicros()} microseconds ({@link #at()} must stay 1). */
        LAG
    }

    /**
     * The fault.
     *
     * @return the kind of fault
     */
    Kind kind();

    /**
     * The rank it hits: 0 to the smallest world of the test minus 1.
     *
     * @return the faulty rank
     */
    int rank();

    /**
     * Which operation of the rank fails or hangs, counted from 1.
     *
     * @return the operation's number, 1 or more
     */
    int at() default 1;

    /**
     * The delay of each operation for {@link Kind#LAG} (1 to 60,000,000 microseconds); 0 for the others.
     *
     * @return the delay in microseconds
     */
    long lagMicros() default 0;
}
