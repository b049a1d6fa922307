package dev.shoal.client;

/**
 * A request that shoal refused or that failed on the way: which request ({@code GetSchema},
 * {@code DoPut}, {@code action create_table}, {@code open} for opening an embedded engine), on
 * which table (or none) at which endpoint, and shoal's status code and message. The message reads
 * {@code shoal <request> on table '<table>' at <endpoint> failed (<CODE>): <detail>}. The cause is
 * the transport's own exception (a {@code FlightRuntimeException}, a {@link
 * ShoalTransportException} such as the embedded engine's {@code ShoalEmbeddedException}).
 *
 * <p>Connectors turn these into their own errors with advice ({@link ShoalClientOptions#errors}).
 */
public class ShoalClientException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  /** The request name of opening an embedded engine, in {@link #request()}. */
  public static final String OPEN = "open";

  private final String code;
  private final String detail;
  private final String request;
  private final String table;
  private final String endpoint;

  /**
   * @param code the status code name as the transport said it, or null for an error of the client
   * @param detail shoal's message (or the client's)
   * @param request the request, e.g. {@code GetSchema}, {@code action create_table}
   * @param table the table, or null
   * @param endpoint the endpoint the request went to
   */
  public ShoalClientException(String code, String detail, String request, String table, String endpoint, Throwable cause) {
    super("shoal " + request + (table != null ? " on table '" + table + "'" : "") + " at " + endpoint + " failed"
        + (code != null ? " (" + code + ")" : "") + ": " + detail, cause);
    this.code = code;
    this.detail = detail;
    this.request = request;
    this.table = table;
    this.endpoint = endpoint;
  }

  /** The status code name as the transport said it ({@code NOT_FOUND}, {@code TIMED_OUT}, ...), or null. */
  public String code() {
    return code;
  }

  /** The status, normalised ({@link ShoalStatus#named}). */
  public ShoalStatus status() {
    return ShoalStatus.named(code);
  }

  /** shoal's message. */
  public String detail() {
    return detail;
  }

  /** The request that failed ({@code GetSchema}, {@code DoPut}, {@code action stats}, {@code open}). */
  public String request() {
    return request;
  }

  /** The table the request named, or null. */
  public String table() {
    return table;
  }

  /** The endpoint the request went to. */
  public String endpoint() {
    return endpoint;
  }
}
