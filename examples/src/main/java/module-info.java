/**
 * Example programs and benchmarks for jnccl. The JMH benchmarks ({@code dev.jnccl.examples.bench})
 * run from the class-path jar {@code target/jnccl-benchmarks.jar}; JMH is an automatic module here
 * only so that the stubs its annotation processor generates compile inside this module.
 */
module dev.jnccl.examples {
    requires dev.jnccl.threads;
    requires dev.jnccl.mpi;
    requires jmh.core;
    requires org.slf4j;

    // JMH instantiates the benchmark and state classes reflectively.
    opens dev.jnccl.examples.bench to jmh.core;
    opens dev.jnccl.examples.bench.jmh_generated to jmh.core;
}
