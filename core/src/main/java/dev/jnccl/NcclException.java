package dev.jnccl;

/**
 * An NCCL call failed. Carries the function, NCCL's result code and text, NCCL's last-error text
 * (often the useful part), and the rank and device of the communicator.
 */
public final class NcclException extends JncclException {
    private static final long serialVersionUID = 1L;

    private final String function;
    private final int result;
    private final String resultText;
    private final String lastError;
    private final int rank;
    private final int device;

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

    /** The NCCL function that failed, e.g. {@code ncclAllReduce}. */
    public String function() {
        return function;
    }

    /** The ncclResult_t value. */
    public int result() {
        return result;
    }

    /** ncclGetErrorString of {@link #result()}. */
    public String resultText() {
        return resultText;
    }

    /** ncclGetLastError at the time of the failure; empty when NCCL had nothing to add. */
    public String lastError() {
        return lastError;
    }

    /** The rank of the communicator, -1 when the call had none. */
    public int rank() {
        return rank;
    }

    /** The CUDA device of the communicator, -1 when unknown. */
    public int device() {
        return device;
    }
}
