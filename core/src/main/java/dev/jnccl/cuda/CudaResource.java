package dev.jnccl.cuda;

/**
 * What {@link CudaStream}, {@link CudaEvent} and {@link DeviceMemory} answer alike about the one
 * {@link CudaHandle} each holds: the device, whether jnccl owns the handle, whether it is closed.
 * Package-private, so users cannot name or extend it (the three types stay final). Its methods are
 * not final on purpose: javac then gives each public type a public bridge of them, which reflection
 * (a method looked up on {@code CudaStream}, not on this class) can call from any package.
 */
abstract sealed class CudaResource permits CudaStream, CudaEvent, DeviceMemory {
    /** The native handle's life: the checks, the waits and the close of the subclass go through it. */
    final CudaHandle handle;

    CudaResource(CudaHandle handle) {
        this.handle = handle;
    }

    /**
     * The device the handle was created on (or, when wrapped, was given for).
     *
     * @return the device
     */
    public int device() {
        return handle.device();
    }

    /**
     * Whether this object owns the handle: {@link AutoCloseable#close() close()} then destroys or
     * frees it; a wrapped handle stays its creator's.
     *
     * @return whether it is owned
     */
    public boolean isOwned() {
        return handle.isOwned();
    }

    /**
     * Whether {@link AutoCloseable#close() close()} has run.
     *
     * @return whether it is closed
     */
    public boolean isClosed() {
        return handle.isClosed();
    }
}
