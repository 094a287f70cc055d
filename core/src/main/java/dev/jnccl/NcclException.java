package dev.jnccl;

/**
 * An NCCL call failed. Carries the function, NCCL's result code and text, NCCL's last-error text
 * (often the useful part), and the rank and device of the communicator.
 */
public final class NcclException extends JncclException {
    private static final long serialVersionUID = 1L;

    /** The NCCL function that failed. */
    private final String function;
    /** The ncclResult_t value. */
    private final int result;
    /** ncclGetErrorString of the result. */
    private final String resultText;
    /** ncclGetLastError at the time of the failure. */
    private final String lastError;
    /** The rank of the communicator, -1 when none. */
    private final int rank;
    /** The CUDA device of the communicator, -1 when unknown. */
    private final int device;

    /**
     * A failed NCCL call.
     *
     * @param function the NCCL function that failed
     * @param result the ncclResult_t value
     * @param resultText ncclGetErrorString of {@code result}
     * @param lastError ncclGetLastError at the time of the failure (may be empty)
     * @param rank the rank of the communicator, -1 when the call had none
     * @param device the CUDA device of the communicator, -1 when unknown
     */
    public NcclException(String function, int result, String resultText, String lastError, int rank, int device) {
        super(function + " failed on rank " + rank + " (device " + device + "): NCCL result " + result + " ("
                + resultText + ")" + (lastError == null || lastError.isBlank() ? "" : ": " + lastError));
        this.function = function;
        this.result = result;
        this.resultText = resultText;
        this.lastError = lastError == null ? "" : lastError;
        this.rank = rank;
        this.device = device;
    }

    /** {@return the NCCL function that failed, e.g. {@code ncclAllReduce}} */
    public String function() {
        return function;
    }

    /** {@return the ncclResult_t value} */
    public int result() {
        return result;
    }

    /** {@return ncclGetErrorString of {@link #result()}} */
    public String resultText() {
        return resultText;
    }

    /** {@return ncclGetLastError at the time of the failure; empty when NCCL had nothing to add} */
    public String lastError() {
        return lastError;
    }

    /** {@return the rank of the communicator, -1 when the call had none} */
    public int rank() {
        return rank;
    }

    /** {@return the CUDA device of the communicator, -1 when unknown} */
    public int device() {
        return device;
    }
}
