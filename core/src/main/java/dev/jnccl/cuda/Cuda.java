package dev.jnccl.cuda;

import static java.lang.foreign.ValueLayout.JAVA_INT;

import dev.jnccl.bindings.cuda.CudaRuntime;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;

/** Process-wide CUDA runtime queries: devices, the calling thread's current device, synchronization. */
public final class Cuda {
    private Cuda() {}

    /** {@return the number of CUDA devices visible to this process (virtual devices on the host emulation)} */
    public static int deviceCount() {
        CudaCalls.libraries();
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment count = arena.allocate(JAVA_INT);
            CudaCalls.check(CudaRuntime.cudaGetDeviceCount(count), "cudaGetDeviceCount", -1);
            return count.get(JAVA_INT, 0);
        }
    }

    /** {@return the calling thread's current device} */
    public static int currentDevice() {
        CudaCalls.libraries();
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment device = arena.allocate(JAVA_INT);
            CudaCalls.check(CudaRuntime.cudaGetDevice(device), "cudaGetDevice", -1);
            return device.get(JAVA_INT, 0);
        }
    }

    /**
     * Makes {@code device} the calling thread's current device.
     *
     * @param device the device index, in {@code [0, deviceCount())}
     */
    public static void setDevice(int device) {
        int count = deviceCount();
        if (device < 0 || device >= count) {
            throw new IllegalArgumentException("setDevice: device " + device + " out of range [0, " + count + ")");
        }
        CudaCalls.check(CudaRuntime.cudaSetDevice(device), "cudaSetDevice", device);
    }

    /** Waits until all work on the current device is done. */
    public static void synchronize() {
        CudaCalls.libraries();
        CudaGraph.refuseOnCapturingThread("synchronize", "the device");
        CudaCalls.check(CudaRuntime.cudaDeviceSynchronize(), "cudaDeviceSynchronize", currentDevice());
    }

    /**
     * {@return whether {@code device} can access {@code peer}'s memory directly}
     *
     * @param device the accessing device
     * @param peer the device whose memory is accessed
     */
    public static boolean canAccessPeer(int device, int peer) {
        CudaCalls.libraries();
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment can = arena.allocate(JAVA_INT);
            CudaCalls.check(CudaRuntime.cudaDeviceCanAccessPeer(can, device, peer), "cudaDeviceCanAccessPeer",
                    device);
            return can.get(JAVA_INT, 0) != 0;
        }
    }

    /**
     * Enables access from the current device to {@code peer}'s memory. Returns false when it was
     * already enabled (not an error).
     *
     * @param peer the device whose memory becomes accessible
     * @return true when access was enabled now, false when it already was
     */
    public static boolean enablePeerAccess(int peer) {
        CudaCalls.libraries();
        int code = CudaRuntime.cudaDeviceEnablePeerAccess(peer, 0);
        if (code == CudaRuntime.cudaErrorPeerAccessAlreadyEnabled()) {
            CudaRuntime.cudaGetLastError(); // the runtime also records it as the thread's last error
            return false;
        }
        CudaCalls.check(code, "cudaDeviceEnablePeerAccess", currentDevice());
        return true;
    }
}
