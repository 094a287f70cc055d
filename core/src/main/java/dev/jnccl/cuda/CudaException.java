package dev.jnccl.cuda;

import dev.jnccl.JncclException;

/**
 * A CUDA runtime call failed. Carries the function, the cudaError_t code and CUDA's text, and the
 * rank (of the communicator that made the call, -1 for none) and device, in that order as in
 * {@link dev.jnccl.NcclException}.
 */
public final class CudaException extends JncclException {
    private static final long serialVersionUID = 1L;

    /** The CUDA runtime function that failed. */
    private final String function;
    /** The cudaError_t value. */
    private final int code;
    /** cudaGetErrorString of the code. */
    private final String text;
    /** The device of the call. */
    private final int device;
    /** The rank of the communicator that made the call, -1 when none did. */
    private final int rank;

    /**
     * A failed CUDA runtime call.
     *
     * @param function the CUDA runtime function that failed
     * @param code     its cudaError_t
     * @param text     cudaGetErrorString of {@code code}
     * @param rank     the rank of the communicator that made the call, -1 when none did
     * @param device   the device the call was about (-1 when unknown)
     */
    public CudaException(String function, int code, String text, int rank, int device) {
        super(function + " failed" + (rank >= 0 ? " on rank " + rank : "") + " (device " + device + "): CUDA error "
                + code + " (" + text + ")");
        this.function = function;
        this.code = code;
        this.text = text;
        this.device = device;
        this.rank = rank;
    }

    /** {@return the CUDA runtime function that failed, e.g. {@code cudaMemcpyAsync}} */
    public String function() {
        return function;
    }

    /** {@return the cudaError_t value} */
    public int code() {
        return code;
    }

    /** {@return cudaGetErrorString of {@link #code()}} */
    public String text() {
        return text;
    }

    /** {@return the current CUDA device of the calling thread, or the device the call was about} */
    public int device() {
        return device;
    }

    /** {@return the rank of the communicator that made the call, -1 when none did} */
    public int rank() {
        return rank;
    }
}
