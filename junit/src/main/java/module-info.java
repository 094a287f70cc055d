/**
 * jnccl's JUnit 5 extension for users' multi-rank tests: {@link dev.jnccl.junit.MultiRankTest} runs a
 * test method as N ranks of a threads-mode pack, each with its own communicator, on the GPUs or on
 * the host emulation; {@link dev.jnccl.junit.InjectFault} makes a rank fail, hang or lag there.
 */
module dev.jnccl.junit {
    requires transitive dev.jnccl.threads;
    requires transitive org.junit.jupiter.api;

    exports dev.jnccl.junit;
    // JUnit instantiates the (package-private) extension reflectively.
    opens dev.jnccl.junit to org.junit.platform.commons;
}
