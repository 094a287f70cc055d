package dev.jnccl.mpi;

import dev.jnccl.JncclException;

/**
 * An MPI call failed (MPI mode runs jnccl's communicators under {@code MPI_ERRORS_RETURN}, so every
 * call's error code is checked). The message names the function, the rank and MPI's own text
 * ({@code MPI_Error_string}).
 */
public final class MpiException extends JncclException {
    private static final long serialVersionUID = 1L;

    /** The MPI function that failed. */
    private final String function;
    /** The error code it returned. */
    private final int errorCode;
    /** The rank in MPI_COMM_WORLD of the calling process, or -1. */
    private final int rank;

    /**
     * A failed MPI call.
     *
     * @param function  the MPI function, e.g. {@code MPI_Bcast}
     * @param errorCode the error code it returned
     * @param errorText MPI_Error_string's text for the code
     * @param rank      the rank in MPI_COMM_WORLD of the calling process, or -1 when not known yet
     */
    public MpiException(String function, int errorCode, String errorText, int rank) {
        super(function + " failed" + (rank >= 0 ? " on rank " + rank : "") + ": MPI error " + errorCode + ": "
                + errorText);
        this.function = function;
        this.errorCode = errorCode;
        this.rank = rank;
    }

    /** {@return the MPI function that failed, e.g. {@code MPI_Bcast}} */
    public String function() {
        return function;
    }

    /** {@return the error code the function returned} */
    public int errorCode() {
        return errorCode;
    }

    /** {@return the rank in MPI_COMM_WORLD of the process that saw the error, or -1 when not known} */
    public int rank() {
        return rank;
    }
}
