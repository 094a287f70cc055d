package dev.jnccl;

import dev.jnccl.internal.Deadlines;
import java.io.IOException;
import java.nio.file.Path;
import java.time.Instant;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.function.UnaryOperator;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Writes one communicator's {@link DiagnosisDump} into the folder of
 * {@link CommunicatorOptions#withDiagnosisDirectory} (or the setting {@value #PROPERTY}): once when the
 * watchdog first sees a transaction pending for half its timeout, so that a process killed before its
 * abort (MPI ends the job when one rank aborts) has left its story, and at the abort. Exists only while
 * dumps are on. A file that cannot be written is a WARN line: a diagnosis aid must not fail an abort.
 */
final class DumpWriter {
    private static final Logger LOG = LoggerFactory.getLogger(Communicator.class);
    /** The system property of the folder: {@value}. */
    static final String PROPERTY = "jnccl.diagnosis.dir";
    /** The environment variable of the folder, read when the property is unset: {@value}. */
    static final String VARIABLE = "JNCCL_DIAGNOSIS_DIR";

    private final Path folder;
    private final FlightRecorder recorder;
    /** How long a transaction is pending before the watchdog's first sign of a hang. */
    private final long firstSignNanos;
    /** Whether the first sign was written (read and written by the watchdog's thread only). */
    private boolean signed;

    private DumpWriter(Path folder, FlightRecorder recorder, long firstSignNanos) {
        this.folder = folder;
        this.recorder = recorder;
        this.firstSignNanos = firstSignNanos;
    }

    /**
     * The writer of a new communicator, or null when dumps are off: no folder in the options or the
     * setting, or a split communicator (whose files would take its parent's names).
     */
    static DumpWriter of(CommunicatorOptions options, boolean split, FlightRecorder recorder) {
        Path folder = folder(options, System::getProperty, System::getenv);
        if (folder == null || split) {
            return null;
        }
        long timeout = options.watchdogEnabled() ? Deadlines.toNanos(options.watchdogTimeout()) : Long.MAX_VALUE;
        return new DumpWriter(folder, recorder, timeout / 2);
    }

    /** {@return the folder of the options, else of the setting (property, then environment), else null} */
    static Path folder(CommunicatorOptions options, UnaryOperator<String> properties, UnaryOperator<String> environment) {
        if (options.diagnosisDirectory() != null) {
            return options.diagnosisDirectory();
        }
        String value = properties.apply(PROPERTY);
        if (value == null || value.isBlank()) {
            value = environment.apply(VARIABLE);
        }
        return value == null || value.isBlank() ? null : Path.of(value.trim());
    }

    /**
     * The watchdog's poll: whether the oldest pending transaction (or an enqueue) is older than half the
     * watchdog's timeout for the first time; the caller then writes {@link #firstSign}. Allocates nothing.
     *
     * @param pendingNanos how long it has been pending, -1 when nothing is
     * @return whether to write the first sign now (true once)
     */
    boolean firstSignDue(long pendingNanos) {
        if (signed || pendingNanos < firstSignNanos) {
            return false;
        }
        signed = true;
        return true;
    }

    /**
     * The dump of the first sign of a hang.
     *
     * @param summary      this rank's summary now
     * @param pendingNanos how long the oldest work has been pending
     */
    void firstSign(RankSummary summary, long pendingNanos) {
        write(summary, "first sign of a hang: a transaction or enqueue pending for "
                + TimeUnit.NANOSECONDS.toMillis(pendingNanos) + " ms (half the watchdog's timeout)", "", null);
    }

    /**
     * The dump of an abort.
     *
     * @param summary   this rank's summary (see {@link DiagnosisDump#summary})
     * @param reason    the abort's reason
     * @param diagnosis the diagnosis the abort carries, or null
     */
    void aborted(RankSummary summary, String reason, Diagnosis diagnosis) {
        write(summary, "abort", reason, diagnosis);
    }

    private void write(RankSummary summary, String trigger, String reason, Diagnosis diagnosis) {
        DiagnosisDump dump = new DiagnosisDump(summary, Instant.now().toString(), trigger, reason,
                List.of(recorder.dump().split("\n")), diagnosis);
        try {
            Path file = dump.write(folder);
            LOG.info("rank {}: diagnosis dump ({}) written to {}", summary.rank(), trigger, file);
        } catch (IOException | RuntimeException e) {
            LOG.warn("rank {}: could not write the diagnosis dump ({}) into {}", summary.rank(), trigger, folder, e);
        }
    }
}
