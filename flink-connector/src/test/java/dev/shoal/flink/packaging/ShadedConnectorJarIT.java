package dev.shoal.flink.packaging;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.io.IOException;
import java.io.InputStream;
import java.io.File;
import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.jar.JarEntry;
import java.util.jar.JarFile;
import java.util.stream.IntStream;
import dev.shoal.embedded.ShoalEmbedded;
import dev.shoal.flink.EmbeddedShoal;
import dev.shoal.flink.ShoalDaemon;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * The shaded connector jar (classifier {@code shaded}, for Flink's lib/), checked after {@code
 * package} (failsafe, in {@code mvn verify}):
 *
 * <ul>
 *   <li>its content: the connector, flink-connector-base, and everything else relocated under
 *       {@code dev.shoal.flink.shaded} - no class of Flink's own, none that could clash with another
 *       jar in lib/; every service file names classes the jar has; embedded mode's shoal-embedded
 *       (with libshoal_jni.so) and arrow-c-data (with libarrow_cdata_jni.so) in their own packages,
 *       because their native libraries bind them by name, but referring to the relocated Arrow and
 *       Jackson;
 *   <li>that it works on its own: the sink (exactly-once, so writer and committer) and the SQL
 *       factory run in a JVM whose class path holds only Flink's jars (the module's test class path
 *       without the connector's dependencies: target/flink-only-classpath.txt) and the shaded jar,
 *       against the real daemon and into an {@code embedded:} directory ({@link ShadedJarJob}).
 * </ul>
 */
class ShadedConnectorJarIT {

  @RegisterExtension static final ShoalDaemon SHOAL = new ShoalDaemon();

  /**
   * Where the connector's classes and the bundled flink-connector-base may live, and the two
   * packages of embedded mode that native code binds by name (not relocated).
   */
  private static final List<String> ALLOWED_CLASS_PREFIXES =
      List.of("dev/shoal/flink/", "org/apache/flink/connector/base/", "dev/shoal/embedded/", "org/apache/arrow/c/");

  /** A reference to an Arrow or Jackson class that was not relocated. */
  private static final Pattern UNRELOCATED =
      Pattern.compile("(?<!shaded/)(org/apache/arrow/(vector|memory|flight)/|com/fasterxml/jackson/)");

  static Path shadedJar() {
    Path jar = Path.of(System.getProperty("shoal.flink.shaded-jar", "target/missing-shaded.jar"));
    assertTrue(Files.isRegularFile(jar), "the shaded jar " + jar + " exists (built in `package`)");
    return jar;
  }

  @Test
  void theJarHoldsTheConnectorAndRelocatedDependenciesOnly() throws IOException {
    Set<String> classes = new TreeSet<>();
    List<String> outside = new ArrayList<>();
    List<String> serviceFiles = new ArrayList<>();
    try (JarFile jar = new JarFile(shadedJar().toFile())) {
      for (JarEntry entry : Collections.list(jar.entries())) {
        String name = entry.getName();
        if (name.endsWith(".class")) {
          classes.add(name);
          if (ALLOWED_CLASS_PREFIXES.stream().noneMatch(name::startsWith)) {
            outside.add(name);
          }
        } else if (name.startsWith("META-INF/services/") && !entry.isDirectory()) {
          serviceFiles.add(name);
        }
      }
      assertEquals(List.of(), outside, "classes outside dev/shoal/flink/ and flink-connector-base");
      for (String expected : List.of(
          "dev/shoal/flink/sink/ShoalSink.class",
          "dev/shoal/flink/sink/ShoalExactlyOnceSink.class",
          "dev/shoal/flink/table/ShoalDynamicTableFactory.class",
          "org/apache/flink/connector/base/sink/AsyncSinkBase.class",
          "dev/shoal/flink/shaded/org/apache/arrow/flight/FlightClient.class",
          "dev/shoal/flink/shaded/io/grpc/netty/NettyChannelBuilder.class",
          "dev/shoal/flink/shaded/io/netty/channel/Channel.class",
          "dev/shoal/flink/shaded/com/google/protobuf/Message.class")) {
        assertTrue(classes.contains(expected), expected + " is in the jar");
      }
      assertTrue(classes.stream().noneMatch(c -> c.startsWith("org/apache/flink/")
              && !c.startsWith("org/apache/flink/connector/base/")),
          "no Flink class but flink-connector-base");
      // Service files (gRPC's providers, the table factory) must name classes the jar has, relocated.
      for (String file : serviceFiles) {
        try (InputStream in = jar.getInputStream(jar.getEntry(file))) {
          for (String line : new String(in.readAllBytes(), StandardCharsets.UTF_8).split("\n")) {
            String implementation = line.replaceAll("#.*", "").trim();
            if (!implementation.isEmpty()) {
              assertTrue(classes.contains(implementation.replace('.', '/') + ".class"),
                  file + " names " + implementation + ", which the jar does not have");
            }
          }
        }
      }
      assertTrue(serviceFiles.contains("META-INF/services/org.apache.flink.table.factories.Factory"),
          "the table factory is registered: " + serviceFiles);

      // Embedded mode: the classes native code binds by name keep their packages, the native
      // libraries are there, and the classes use the relocated Arrow (and Jackson).
      for (String expected : List.of(
          "dev/shoal/flink/common/EndpointTableClient.class",
          "dev/shoal/embedded/EmbeddedShoalClient.class",
          "dev/shoal/embedded/ShoalEmbedded.class",
          "dev/shoal/embedded/ShoalNative.class",
          "dev/shoal/embedded/ShoalEmbeddedException.class",
          "org/apache/arrow/c/Data.class",
          "org/apache/arrow/c/jni/JniWrapper.class",
          "org/apache/arrow/c/jni/PrivateData.class",
          "org/apache/arrow/c/jni/CDataJniException.class",
          "org/apache/arrow/c/ArrayStreamExporter$ExportedArrayStreamPrivateData.class",
          "dev/shoal/flink/shaded/org/apache/arrow/vector/VectorSchemaRoot.class",
          "dev/shoal/flink/shaded/org/apache/arrow/memory/BufferAllocator.class")) {
        assertTrue(classes.contains(expected), expected + " is in the jar");
      }
      for (String library : List.of(
          "dev/shoal/embedded/native/linux-x86_64/libshoal_jni.so", "arrow_cdata_jni/x86_64/libarrow_cdata_jni.so")) {
        JarEntry entry = jar.getJarEntry(library);
        assertTrue(entry != null && entry.getSize() > 0, library + " is in the jar");
      }
      List<String> relocatedNativeBound = classes.stream()
          .filter(c -> c.startsWith("dev/shoal/flink/shaded/") && (c.contains("/arrow/c/") || c.contains("/dev/shoal/embedded/")))
          .toList();
      assertEquals(List.of(), relocatedNativeBound, "classes that native code binds by name were relocated");
      for (String user : List.of(
          "org/apache/arrow/c/Data.class", "org/apache/arrow/c/ArrowArrayStreamReader.class",
          "dev/shoal/embedded/ShoalEmbedded.class", "dev/shoal/embedded/PutResult.class")) {
        String constants;
        try (InputStream in = jar.getInputStream(jar.getEntry(user))) {
          constants = new String(in.readAllBytes(), StandardCharsets.ISO_8859_1);
        }
        Matcher unrelocated = UNRELOCATED.matcher(constants);
        assertTrue(!unrelocated.find(), () -> user + " refers to the unrelocated " + unrelocated.group());
        assertTrue(constants.contains("dev/shoal/flink/shaded/org/apache/arrow/")
            || constants.contains("dev/shoal/flink/shaded/com/fasterxml/jackson/"), user + " refers to the relocated classes");
      }
      System.out.printf("%s: %,d bytes, %,d classes, service files %s%n",
          shadedJar().getFileName(), Files.size(shadedJar()), classes.size(), serviceFiles);
    }
  }

  /**
   * No thread and no class loader of a finished job survive it. A Flink session cluster loads a
   * job's connector through a user-code class loader of the job's own, and runs the job's tasks
   * with it as their context class loader. Three "jobs" here do the same with the shaded jar: a
   * child-first class loader over it, a task thread that connects, writes a batch and closes its
   * client (what the writer does when a job ends). Afterwards no live thread may carry that loader
   * (as its context class loader, or as the loader of its class: the relocated Netty's threads),
   * and the loader must be collectable. gRPC's shared event loops used to live on for a second
   * and its {@code grpc-shared-destroyer} thread for good ("Trying to access closed classloader").
   */
  @Test
  void aFinishedJobLeavesNoThreadAndNoClassLoaderBehind() throws Exception {
    for (int job = 0; job < 3; job++) {
      String table = "leaks" + job;
      SHOAL.createTable(table, "reject");
      JobClassLoader loader = new JobClassLoader(shadedJar());
      runJob(loader, table);
      // Flink closes the job's class loader as soon as its tasks are done: by then every thread
      // that runs the loader's code must have ended (a short grace for threads that are exiting).
      long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(250);
      List<String> left = threadsOf(loader);
      while (!left.isEmpty() && System.nanoTime() < deadline) {
        Thread.sleep(10);
        left = threadsOf(loader);
      }
      assertEquals(List.of(), left, "threads that outlive job " + job + " with its class loader");
      loader.close();
      java.lang.ref.WeakReference<ClassLoader> collected = new java.lang.ref.WeakReference<>(loader);
      loader = null;
      deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
      while (collected.get() != null && System.nanoTime() < deadline) {
        System.gc();
        Thread.sleep(50);
      }
      assertTrue(collected.get() == null, "job " + job + "'s class loader is collected once the job is done");
      assertEquals(2, SHOAL.column(table, "id").size());
    }
  }

  /** Child-first over the shaded jar for the connector's packages, as Flink's user-code class loader. */
  private static final class JobClassLoader extends java.net.URLClassLoader {
    JobClassLoader(Path jar) throws IOException {
      super(new java.net.URL[] {jar.toUri().toURL()}, ShadedConnectorJarIT.class.getClassLoader());
    }

    @Override
    protected Class<?> loadClass(String name, boolean resolve) throws ClassNotFoundException {
      if (!name.startsWith("dev.shoal.")) {
        return super.loadClass(name, resolve);
      }
      synchronized (getClassLoadingLock(name)) {
        Class<?> c = findLoadedClass(name);
        if (c == null) {
          try {
            c = findClass(name);
          } catch (ClassNotFoundException e) {
            c = super.loadClass(name, false);
          }
        }
        if (resolve) {
          resolveClass(c);
        }
        return c;
      }
    }
  }

  /** A task thread with the job's class loader: connects, writes two records, closes the client. */
  private static void runJob(ClassLoader loader, String table) throws Exception {
    Throwable[] failure = new Throwable[1];
    Thread task = new Thread(() -> {
      try {
        Class<?> clientClass = Class.forName("dev.shoal.flink.common.EndpointTableClient", true, loader);
        assertTrue(clientClass.getClassLoader() == loader, "the connector comes from the job's class loader");
        Class<?> optionsClass = Class.forName("dev.shoal.flink.common.ShoalClientOptions", true, loader);
        java.lang.reflect.Method options = optionsClass.getDeclaredMethod("of", String.class, java.time.Duration.class);
        options.setAccessible(true);
        java.lang.reflect.Method open = clientClass.getDeclaredMethod("open", String.class, String.class, optionsClass);
        open.setAccessible(true);
        AutoCloseable client = (AutoCloseable) open.invoke(null, SHOAL.endpoint(), table,
            options.invoke(null, null, java.time.Duration.ofSeconds(30)));
        try {
          java.lang.reflect.Method put = clientClass.getDeclaredMethod("put", List.class, long.class, String.class);
          put.setAccessible(true);
          List<byte[]> records = List.of("{\"id\": 1}".getBytes(StandardCharsets.UTF_8), "{\"id\": 2}".getBytes(StandardCharsets.UTF_8));
          put.invoke(client, records, 22L, null);
        } finally {
          client.close();
        }
      } catch (Throwable t) {
        failure[0] = t;
      }
    }, "task-" + table);
    task.setContextClassLoader(loader);
    task.start();
    task.join();
    if (failure[0] != null) {
      throw new AssertionError("the job's client failed", failure[0]);
    }
  }

  private static List<String> threadsOf(ClassLoader loader) {
    List<String> out = new ArrayList<>();
    for (Thread t : Thread.getAllStackTraces().keySet()) {
      if (t.isAlive() && (t.getContextClassLoader() == loader || t.getClass().getClassLoader() == loader)) {
        out.add(t.getName());
      }
    }
    return out;
  }

  @Test
  void theSinkAndTheTableFactoryRunFromTheJarWithOnlyFlinkBesideIt(@TempDir Path tmp) throws Exception {
    SHOAL.createTable("shaded_stream", "reject");
    SHOAL.createTable("shaded_sql", "reject");
    // The embedded directory's tables, made here; the engine closes (and unlocks the directory)
    // before the job's JVM opens it.
    Path embeddedDir = tmp.resolve("data");
    try (ShoalEmbedded store = ShoalEmbedded.open(embeddedDir)) {
      store.createTable("shaded_stream");
      store.createTable("shaded_sql");
    }
    List<String> classPath = new ArrayList<>();
    classPath.add(shadedJar().toString());
    String flinkOnly = Files.readString(Path.of(System.getProperty("shoal.flink.only-classpath"))).trim();
    for (String entry : flinkOnly.split(File.pathSeparator)) {
      assertTrue(!entry.contains("/org/apache/arrow/") && !entry.contains("/io/grpc/") && !entry.contains("/io/netty/")
          && !entry.contains("flink-connector-base") && !entry.contains("shoal-embedded") && !entry.contains("/embedded/"),
          "not Flink's: " + entry);
      classPath.add(entry);
    }
    // This class's folder, for ShadedJarJob and the log configuration (the connector's own classes
    // are in target/classes, which is not on that class path).
    classPath.add(Path.of(ShadedConnectorJarIT.class.getProtectionDomain().getCodeSource().getLocation().toURI())
        .toString());

    // A JVM of its own, as a Flink process with the jar in lib/: the class path is the system class
    // path (Flink's MiniCluster loads job classes through it). The module-opening flags are this
    // JVM's (what Flink's default env.java.opts.all opens, java.nio included).
    List<String> command = new ArrayList<>();
    command.add(Path.of(System.getProperty("java.home"), "bin", "java").toString());
    ManagementFactory.getRuntimeMXBean().getInputArguments().stream()
        .filter(a -> a.startsWith("--add-opens") || a.startsWith("--add-exports"))
        .forEach(command::add);
    command.addAll(List.of("-cp", String.join(File.pathSeparator, classPath), ShadedJarJob.class.getName(),
        "shaded_stream", "shaded_sql", "1000", SHOAL.endpoint(), "embedded:" + embeddedDir));
    Path log = Path.of("target", "shaded-jar-job.log");
    Process job = new ProcessBuilder(command).redirectErrorStream(true).redirectOutput(log.toFile()).start();
    if (!job.waitFor(5, TimeUnit.MINUTES)) {
      job.destroyForcibly();
      fail("the jobs did not finish in 5 minutes; log: " + log.toAbsolutePath());
    }
    List<String> output = Files.readAllLines(log);
    assertEquals(0, job.exitValue(), () -> "the jobs failed with only Flink and the shaded jar on the class path ("
        + log.toAbsolutePath() + "):\n" + String.join("\n", output.subList(Math.max(0, output.size() - 60), output.size())));

    List<String> expected = IntStream.range(0, 1000).mapToObj(i -> "s" + i).sorted().toList();
    assertEquals(expected, SHOAL.column("shaded_stream", "id").stream().sorted().toList(),
        "every record once (exactly-once, from the shaded jar)");
    assertEquals(List.of("sql-1", "sql-2", "sql-3"), SHOAL.column("shaded_sql", "id").stream().sorted().toList(),
        "the SQL rows, through the shaded jar's table factory");
    assertTrue(output.stream().anyMatch(l -> l.contains("shaded jar jobs finished: embedded:")), "the embedded jobs ran");
    // The job's JVM has exited (its engine closed at shutdown): read the directory here.
    try (ShoalEmbedded store = ShoalEmbedded.open(embeddedDir)) {
      assertEquals(expected, EmbeddedShoal.column(store, "shaded_stream", "id").stream().sorted().toList(),
          "every record once (exactly-once, embedded, from the shaded jar)");
      assertEquals(List.of("sql-1", "sql-2", "sql-3"), EmbeddedShoal.column(store, "shaded_sql", "id").stream().sorted().toList(),
          "the SQL rows, embedded, through the shaded jar's table factory");
    }
  }
}
