package dev.jnccl;

import java.util.List;
import java.util.Objects;

/**
 * A reduction: one of NCCL's built-in ncclRedOp_t ({@link #SUM}, {@link #PROD}, {@link #MAX},
 * {@link #MIN}, {@link #AVG}), or a {@linkplain #scaledSum pre-multiplied sum} (NCCL's
 * ncclRedOpCreatePreMulSum), which scales gradients in the same pass that sums them.
 *
 * <p>Immutable; two operations are equal when they have the same {@link #kind()} and factor.
 * Switch on {@link #kind()}:
 * {@snippet :
 * double scale = switch (op.kind()) {
 *     case SCALED_SUM -> op.factor();
 *     default -> 1.0;
 * };
 * }
 */
public final class ReduceOp {
    /** The kinds of reduction. */
    public enum Kind {
        /** Sum over ranks. */
        SUM,
        /** Product over ranks. */
        PROD,
        /** Maximum over ranks. */
        MAX,
        /** Minimum over ranks. */
        MIN,
        /** Sum divided by the world size (NCCL 2.10+). */
        AVG,
        /** Sum of each rank's input multiplied by a factor: {@link ReduceOp#scaledSum}. */
        SCALED_SUM
    }

    /** Sum over ranks. */
    public static final ReduceOp SUM = new ReduceOp(Kind.SUM, 1.0);
    /** Product over ranks. */
    public static final ReduceOp PROD = new ReduceOp(Kind.PROD, 1.0);
    /** Maximum over ranks. */
    public static final ReduceOp MAX = new ReduceOp(Kind.MAX, 1.0);
    /** Minimum over ranks. */
    public static final ReduceOp MIN = new ReduceOp(Kind.MIN, 1.0);
    /** Sum divided by the world size (NCCL 2.10+). */
    public static final ReduceOp AVG = new ReduceOp(Kind.AVG, 1.0);

    private static final List<ReduceOp> BUILT_IN = List.of(SUM, PROD, MAX, MIN, AVG);

    private final Kind kind;
    private final double factor;

    private ReduceOp(Kind kind, double factor) {
        this.kind = kind;
        this.factor = factor;
    }

    /**
     * The sum of every rank's input multiplied by {@code factor} (NCCL's pre-multiplied sum,
     * ncclRedOpCreatePreMulSum with a host scalar; NCCL 2.11+): e.g. {@code scaledSum(1.0 / steps)}
     * averages gradients accumulated over {@code steps} micro-batches while they are summed over
     * ranks. NCCL multiplies in the tensor's type, so the factor is first rounded to that type
     * (through FP32 for FP16, BF16 and the FP8 types, round to nearest even): its magnitude must
     * not exceed the type's largest finite value, and for integer tensors it must be a whole number
     * the type can hold (integers multiply and sum with wrap-around, as NCCL does). Those checks
     * are made when a command uses the operation, since only then the type is known.
     *
     * @param factor the multiplier, finite
     * @return the operation
     * @throws IllegalArgumentException naming the factor when it is NaN or infinite
     */
    public static ReduceOp scaledSum(double factor) {
        if (!Double.isFinite(factor)) {
            throw new IllegalArgumentException("ReduceOp.scaledSum: factor " + factor
                    + " is not finite: expected a finite number");
        }
        return new ReduceOp(Kind.SCALED_SUM, factor);
    }

    /**
     * {@return NCCL's built-in operations, in the order SUM, PROD, MAX, MIN, AVG: a new array each
     * call, as the enum's {@code values()} of earlier versions}
     */
    public static ReduceOp[] values() {
        return BUILT_IN.toArray(new ReduceOp[0]);
    }

    /**
     * The built-in operation of that name, as the enum's {@code valueOf} of earlier versions.
     *
     * @param name {@code "SUM"}, {@code "PROD"}, {@code "MAX"}, {@code "MIN"} or {@code "AVG"}
     * @return the operation
     * @throws IllegalArgumentException when {@code name} names none of them (a scaled sum has no
     *                                  name: {@link #scaledSum})
     * @throws NullPointerException     when {@code name} is null
     */
    public static ReduceOp valueOf(String name) {
        Objects.requireNonNull(name, "ReduceOp.valueOf: name is null");
        for (ReduceOp op : BUILT_IN) {
            if (op.kind.name().equals(name)) {
                return op;
            }
        }
        throw new IllegalArgumentException("ReduceOp.valueOf: no built-in operation named \"" + name
                + "\": expected one of SUM, PROD, MAX, MIN, AVG (a scaled sum: ReduceOp.scaledSum(factor))");
    }

    /** {@return the name of this operation's {@link #kind()}, as the enum's {@code name()} of earlier versions} */
    public String name() {
        return kind.name();
    }

    /** {@return what this operation computes} */
    public Kind kind() {
        return kind;
    }

    /** {@return the multiplier of a {@link Kind#SCALED_SUM}; 1 for the built-in operations} */
    public double factor() {
        return factor;
    }

    /** {@return the name of a built-in operation ("SUM", ...), or "SCALED_SUM(factor)"} */
    @Override
    public String toString() {
        return kind == Kind.SCALED_SUM ? "SCALED_SUM(" + factor + ")" : kind.name();
    }

    @Override
    public boolean equals(Object other) {
        return other instanceof ReduceOp op && op.kind == kind
                && Double.doubleToLongBits(op.factor) == Double.doubleToLongBits(factor);
    }

    @Override
    public int hashCode() {
        return kind.hashCode() * 31 + Double.hashCode(factor);
    }
}
