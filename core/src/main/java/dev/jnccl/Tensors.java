package dev.jnccl;

import dev.jnccl.cuda.DeviceMemory;
import java.util.Objects;

/**
 * The checks of a {@link DeviceTensor} argument that its {@link DeviceTensor#memory() memory}
 * makes possible: the memory was not closed, and it is on the expected device. Made before any
 * native call, so a freed buffer or one of another GPU gives an exception naming the operation and
 * the argument instead of a CUDA error or corrupted memory. A tensor of a raw address (no memory)
 * passes both. Allocates nothing unless it throws. ({@code CudaStream.copyAsync} makes the
 * open-memory check of its own tensors in the same words: it lives in {@code dev.jnccl.cuda}.)
 */
final class Tensors {
    /** {@code expectedDevice} of {@link #requireOpen}-only checks: any device will do. */
    static final int ANY_DEVICE = -1;

    private Tensors() {}

    /**
     * Checks that {@code tensor} is given and its memory, when known, is open.
     *
     * @param operation the public call, e.g. {@code copyAsync}
     * @param argument  the parameter's name, e.g. {@code from}
     * @throws NullPointerException  when {@code tensor} is null
     * @throws IllegalStateException when its memory was closed
     */
    static void requireOpen(String operation, String argument, DeviceTensor tensor) {
        if (tensor == null) {
            throw new NullPointerException(operation + ": " + argument + " is null");
        }
        DeviceMemory memory = tensor.memory();
        if (memory != null && memory.isClosed()) {
            throw new IllegalStateException(operation + ": " + argument + " " + tensor + " views " + memory
                    + (memory.isOwned() ? ", which was closed: its memory was freed"
                            : ", which was closed: jnccl no longer uses the wrapped pointer"));
        }
    }

    /**
     * Checks that {@code tensor} is given, its memory (when known) open and on {@code device},
     * the device of the communicator of {@code rank}.
     *
     * @param operation the public call, e.g. {@code allGather}
     * @param argument  the parameter's name, e.g. {@code shard}
     * @param rank      the rank of the communicator that runs the operation
     * @param device    that communicator's device
     * @throws NullPointerException     when {@code tensor} is null
     * @throws IllegalStateException    when its memory was closed
     * @throws IllegalArgumentException when its memory is on another device
     */
    static void requireUsable(String operation, String argument, DeviceTensor tensor, int rank, int device) {
        requireOpen(operation, argument, tensor);
        int actual = tensor.device();
        if (actual != ANY_DEVICE && actual != device) {
            throw new IllegalArgumentException(operation + ": " + argument + " is on device " + actual
                    + " but the communicator of rank " + rank + " is on device " + device);
        }
    }
}
