package dev.shoal.flink;


import java.io.IOException;
import java.net.ServerSocket;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import dev.shoal.client.testing.DaemonProcess;
import dev.shoal.client.testing.TargetMode;
import org.apache.arrow.flight.Action;
import org.apache.arrow.flight.CallOption;
import org.apache.arrow.flight.FlightCallHeaders;
import org.apache.arrow.flight.HeaderCallOption;
import org.apache.arrow.flight.FlightClient;
import org.apache.arrow.flight.FlightDescriptor;
import org.apache.arrow.flight.FlightEndpoint;
import org.apache.arrow.flight.FlightInfo;
import org.apache.arrow.flight.FlightStream;
import org.apache.arrow.flight.Location;
import org.apache.arrow.flight.Result;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.memory.RootAllocator;
import org.apache.arrow.vector.FieldVector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.junit.jupiter.api.extension.AfterAllCallback;
import org.junit.jupiter.api.extension.BeforeAllCallback;
import org.junit.jupiter.api.extension.ExtensionContext;

/**
 * The real {@code shoal} daemon as a process for a test class (JUnit 5 extension, {@code
 * @RegisterExtension static}): {@code shoal serve --listen 127.0.0.1:0 --data-dir DIR} through
 * shoal-client's {@link DaemonProcess} (it binds a free port itself; a restart listens on the same
 * one), stopped with SIGTERM. Also a small Flight client for the tests: create a table, read
 * a column back with GetFlightInfo + DoGet on every endpoint. The {@link ShoalTarget} of the
 * daemon mode.
 */
public final class ShoalDaemon implements BeforeAllCallback, AfterAllCallback, ShoalTarget {

  static {
    // Arrow initialises its compression codec factory through the thread's context class loader on
    // first use. gRPC's shared executor threads are created inside Flink jobs and keep a job's
    // user-code class loader (closed after the job) as context loader, so the test client's first
    // DoGet would fail in them; initialise the factory here, on the test thread, instead.
    org.apache.arrow.vector.compression.CompressionCodec.Factory.INSTANCE.hashCode();
  }

  /** 0 until the first start (or the port asked for); the port the daemon bound then, which restarts reuse. */
  private volatile int port;
  private final String token;
  private final List<String> extraArgs;
  private Path dataDir;
  /** The temporary directory {@link #start()} made (deleted by {@link #stop()}), or null. */
  private Path ownedDir;
  private DaemonProcess process;
  private BufferAllocator allocator;
  private FlightClient client;

  public ShoalDaemon() {
    this(null);
  }

  /** A daemon started with {@code --auth-token token} (null: none); the helper's client sends it. */
  public ShoalDaemon(String token) {
    this(token, List.of());
  }

  /** A daemon started with {@code --auth-token token} (null: none) and more {@code serve} arguments. */
  public ShoalDaemon(String token, List<String> extraArgs) {
    this(token, extraArgs, 0);
  }

  /** As {@link #ShoalDaemon(String, List)}, listening on {@code port} (0: a free one it picks). */
  public ShoalDaemon(String token, List<String> extraArgs, int port) {
    this.token = token;
    this.extraArgs = List.copyOf(extraArgs);
    this.port = port;
  }

  /** The daemon binary ({@link DaemonProcess#binary()}). */
  public static Path binary() {
    return DaemonProcess.binary();
  }

  /** The GitHub Archive events sample ({@link DaemonProcess#events()}). */
  public static Path events() {
    return DaemonProcess.events();
  }

  public static int freePort() {
    try (ServerSocket socket = new ServerSocket(0)) {
      return socket.getLocalPort();
    } catch (IOException e) {
      throw new IllegalStateException(e);
    }
  }

  @Override
  public void beforeAll(ExtensionContext context) throws Exception {
    start();
  }

  @Override
  public void afterAll(ExtensionContext context) throws Exception {
    stop();
  }

  @Override
  public TargetMode mode() {
    return TargetMode.DAEMON;
  }

  @Override
  public void start() throws Exception {
    ownedDir = Files.createTempDirectory("shoal-flink-test");
    start(ownedDir.resolve("data"));
  }

  /** Starts the daemon on {@code dataDir} (created if missing; its tables are recovered). */
  public void start(Path dataDir) throws Exception {
    this.dataDir = dataDir;
    launch();
  }

  /** SIGKILL: the daemon dies at once, with whatever was not durable. */
  public void kill() throws Exception {
    if (process != null) {
      process.kill();
    }
  }

  /** Starts the daemon again on the same port and data directory (it recovers its tables). */
  public void restart() throws Exception {
    closeClient();
    process.restart();
    openClient();
  }

  /**
   * Starts the daemon again on the same port, on another (empty) data directory: a node whose
   * disk was lost, replaced; its tables come from its remote store ({@code --remote}).
   */
  public void replace(Path emptyDataDir) throws Exception {
    closeClient();
    this.dataDir = emptyDataDir;
    launch();
  }

  private void launch() throws Exception {
    List<String> args = new ArrayList<>();
    if (token != null) {
      args.addAll(List.of("--auth-token", token));
    }
    args.addAll(extraArgs);
    process = DaemonProcess.startAt("127.0.0.1:" + port, dataDir, args);
    port = process.port();
    openClient();
  }

  private void openClient() throws Exception {
    allocator = new RootAllocator();
    client = FlightClient.builder(allocator, new Location(new URI(endpoint()))).build();
  }

  private void closeClient() throws Exception {
    if (client != null) {
      client.close();
      allocator.close();
      client = null;
    }
  }

  /** SIGTERM, then wait. */
  @Override
  public void stop() throws Exception {
    closeClient();
    if (process != null) {
      process.stop();
    }
    ShoalTarget.deleteTree(ownedDir);
    ownedDir = null;
  }

  @Override
  public String endpoint() {
    return "grpc://127.0.0.1:" + port;
  }

  /** The daemon's output so far. */
  public List<String> output() {
    return process == null ? List.of() : process.output();
  }

  /** {@code create_table} with the given {@code on_invalid_json} policy ("reject" or "skip"). */
  @Override
  public void createTable(String name, String onInvalidJson) {
    action("create_table", "{\"name\":\"" + name + "\",\"on_invalid_json\":\"" + onInvalidJson + "\"}");
  }

  private CallOption[] options() {
    if (token == null) {
      return new CallOption[0];
    }
    FlightCallHeaders headers = new FlightCallHeaders();
    headers.insert("authorization", "Bearer " + token);
    return new CallOption[] {new HeaderCallOption(headers)};
  }

  @Override
  public String action(String type, String body) {
    Iterator<Result> results = client.doAction(new Action(type, body.getBytes(StandardCharsets.UTF_8)), options());
    StringBuilder answer = new StringBuilder();
    while (results.hasNext()) {
      answer.append(new String(results.next().getBody(), StandardCharsets.UTF_8));
    }
    return answer.toString();
  }

  /**
   * Every value of {@code column} in {@code table}: GetFlightInfo with {@code {"table","columns"}},
   * then DoGet on every endpoint. Values as strings (JSON text for nested values).
   */
  @Override
  public List<String> column(String table, String column) throws Exception {
    String command = "{\"table\":\"" + table + "\",\"columns\":[\"" + column + "\"]}";
    FlightInfo info = client.getInfo(FlightDescriptor.command(command.getBytes(StandardCharsets.UTF_8)), options());
    List<String> values = new ArrayList<>();
    for (FlightEndpoint endpoint : info.getEndpoints()) {
      try (FlightStream stream = client.getStream(endpoint.getTicket(), options())) {
        while (stream.next()) {
          VectorSchemaRoot root = stream.getRoot();
          FieldVector vector = root.getVector(column);
          for (int i = 0; i < root.getRowCount(); i++) {
            Object value = vector.getObject(i);
            values.add(value == null ? null : value.toString());
          }
        }
      }
    }
    return values;
  }

  /** The {@code id} of every line of the GitHub Archive events file. */
  public static List<String> eventIds() throws IOException {
    List<String> ids = new ArrayList<>();
    var mapper = new com.fasterxml.jackson.databind.ObjectMapper();
    for (String line : Files.readAllLines(events(), StandardCharsets.UTF_8)) {
      if (!line.isBlank()) {
        ids.add(mapper.readTree(line).get("id").asText());
      }
    }
    return ids;
  }
}
