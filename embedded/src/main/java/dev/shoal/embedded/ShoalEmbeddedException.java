package dev.shoal.embedded;

import java.util.Objects;

import dev.shoal.client.ShoalTransportException;

/**
 * An error of embedded shoal: every failing call of {@link ShoalEmbedded} (and of the natives in
 * {@link ShoalNative}, which construct it from native code) throws one.
 *
 * <p>It carries the <b>operation</b> that failed ({@code "open"}, {@code "action create_table"},
 * {@code "doPut"}, {@code "doGet"}, {@code "read"}, ...) and a <b>code</b>: the name of the gRPC
 * status the daemon would have answered with for the same request (docs/protocol.md:
 * {@code INVALID_ARGUMENT}, {@code NOT_FOUND}, {@code ALREADY_EXISTS}, {@code FAILED_PRECONDITION},
 * {@code RESOURCE_EXHAUSTED}, {@code UNAVAILABLE}, {@code INTERNAL}, ...), plus two of embedded
 * mode's own:
 *
 * <ul>
 *   <li>{@link #CLOSED}: the store (or the stream) was closed, or never opened;
 *   <li>{@link #PANIC}: the engine panicked; the panic was caught at the JNI boundary and its text is
 *       the message. The JVM is unaffected, but the store that panicked should be closed.
 * </ul>
 *
 * <p>{@link #getMessage()} reads {@code "<operation>: <CODE>: <message>"}, e.g. {@code "action
 * register_psf: ALREADY_EXISTS: PSF \"actor_id\" already exists in table \"events\""}.
 *
 * <p>It is the client's {@link ShoalTransportException}, so that shoal's Java client reads its code
 * ({@code ShoalStatus}) like any transport's.
 */
public class ShoalEmbeddedException extends ShoalTransportException {
  private static final long serialVersionUID = 1L;

  /** Code of a call on a store or stream that was closed (or never opened). */
  public static final String CLOSED = "CLOSED";
  /** Code of a Rust panic caught at the JNI boundary. */
  public static final String PANIC = "PANIC";

  /** The operation that failed. */
  private final String operation;
  /** The status code name. */
  private final String code;
  /** The message without the prefix. */
  private final String detail;

  /**
   * Creates the exception. Native code calls this constructor (JNI signature {@code
   * (Ljava/lang/String;Ljava/lang/String;Ljava/lang/String;)V}); keep it.
   *
   * @param operation the operation that failed, e.g. {@code "action create_table"}
   * @param code the gRPC status code name, {@link #CLOSED} or {@link #PANIC}
   * @param message what went wrong, for a person
   */
  public ShoalEmbeddedException(String operation, String code, String message) {
    this(operation, code, message, null);
  }

  /**
   * Creates the exception with a cause (Java-side failures: loading the library, Arrow import).
   *
   * @param operation the operation that failed
   * @param code the gRPC status code name, {@link #CLOSED} or {@link #PANIC}
   * @param message what went wrong, for a person
   * @param cause the underlying exception, or null
   */
  public ShoalEmbeddedException(String operation, String code, String message, Throwable cause) {
    super(
        Objects.requireNonNullElse(operation, "?")
            + ": "
            + Objects.requireNonNullElse(code, "UNKNOWN")
            + ": "
            + Objects.requireNonNullElse(message, ""),
        cause);
    this.operation = Objects.requireNonNullElse(operation, "?");
    this.code = Objects.requireNonNullElse(code, "UNKNOWN");
    this.detail = Objects.requireNonNullElse(message, "");
  }

  /**
   * The operation that failed.
   *
   * @return e.g. {@code "open"}, {@code "action drop_table"}, {@code "getFlightInfo"}
   */
  public String operation() {
    return operation;
  }

  /**
   * The status code name.
   *
   * @return e.g. {@code "INVALID_ARGUMENT"}, {@code "NOT_FOUND"}, {@link #CLOSED}, {@link #PANIC}
   */
  @Override
  public String code() {
    return code;
  }

  /**
   * The message without the operation and code prefix.
   *
   * @return the engine's (or the Java side's) message
   */
  @Override
  public String detail() {
    return detail;
  }
}
