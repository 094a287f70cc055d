package dev.jnccl.internal;

/**
 * Which CUDA graph capture the calling thread is in, and which graphs are still open: what a
 * communicator needs to file captured transactions under their graph and to refuse a close while a
 * graph uses it. The graph type answers through a {@link Source} it installs when it is first used,
 * so that these questions stay off its public surface; before that no capture can have happened.
 */
public final class Captures {
    /** The answers, given by the graph type. */
    public interface Source {
        /**
         * The id the graph the calling thread captures will have.
         *
         * @return the id, or 0 outside a capture
         */
        long currentCaptureId();

        /**
         * Whether graph {@code id} was instantiated and is not closed yet.
         *
         * @param id a graph's id
         * @return whether it is open
         */
        boolean isOpen(long id);
    }

    private static volatile Source source;

    private Captures() {}

    /**
     * Installs the answers; once.
     *
     * @param answers the graph type's answers
     * @throws IllegalStateException when answers are installed already
     */
    public static synchronized void install(Source answers) {
        if (source != null) {
            throw new IllegalStateException("capture answers are installed already");
        }
        source = answers;
    }

    /**
     * The id the graph the calling thread captures will have.
     *
     * @return the id, or 0 outside a capture (and while no graph was ever made)
     */
    public static long currentCaptureId() {
        Source answers = source;
        return answers == null ? 0 : answers.currentCaptureId();
    }

    /**
     * Whether graph {@code id} is open.
     *
     * @param id a graph's id
     * @return whether it was instantiated and is not closed yet
     */
    public static boolean isOpen(long id) {
        Source answers = source;
        return answers != null && answers.isOpen(id);
    }
}
