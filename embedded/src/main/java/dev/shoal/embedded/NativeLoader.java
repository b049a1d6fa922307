package dev.shoal.embedded;

import java.io.IOException;
import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.Locale;

/**
 * Loads {@code libshoal_jni.so} into the JVM, once.
 *
 * <p>Where the library comes from, first match wins:
 *
 * <ol>
 *   <li>the system property {@value #LIBRARY_PROPERTY}: absolute path of the library (for
 *       development: {@code -Dshoal.jni.library=$PWD/target/debug/libshoal_jni.so});
 *   <li>the environment variable {@value #LIBRARY_ENV}: the same;
 *   <li>the class-path resource {@value #RESOURCE} (the jar built by Maven carries it), copied to a
 *       temporary file (deleted when the JVM exits) and loaded from there. Only linux-x86_64 is
 *       built; on any other platform, or when the resource is missing, loading fails with a message
 *       that names the platform.
 * </ol>
 *
 * <p>{@link ShoalEmbedded#open} loads the library; calling {@link #load()} earlier is only needed
 * to fail fast. A failure throws {@link ShoalEmbeddedException} with operation {@code "load
 * native library"} and code {@code UNAVAILABLE}; a later call tries again.
 */
public final class NativeLoader {
  /** System property naming the library file; overrides the jar resource. */
  public static final String LIBRARY_PROPERTY = "shoal.jni.library";
  /** Environment variable naming the library file; overrides the jar resource. */
  public static final String LIBRARY_ENV = "SHOAL_JNI_LIBRARY";
  /** The class-path resource holding the linux-x86_64 library. */
  public static final String RESOURCE = "/dev/shoal/embedded/native/linux-x86_64/libshoal_jni.so";

  private static final String OPERATION = "load native library";
  private static volatile String loadedFrom;

  private NativeLoader() {}

  /**
   * Loads the library unless this JVM already did. Thread-safe.
   *
   * @throws ShoalEmbeddedException (code {@code UNAVAILABLE}) when the library cannot be found,
   *     extracted or loaded
   */
  public static void load() {
    if (loadedFrom != null) {
      return;
    }
    synchronized (NativeLoader.class) {
      if (loadedFrom != null) {
        return;
      }
      String override = System.getProperty(LIBRARY_PROPERTY);
      String origin = "system property " + LIBRARY_PROPERTY;
      if (override == null || override.isBlank()) {
        override = System.getenv(LIBRARY_ENV);
        origin = "environment variable " + LIBRARY_ENV;
      }
      if (override != null && !override.isBlank()) {
        Path path = Path.of(override).toAbsolutePath();
        if (!Files.isRegularFile(path)) {
          throw new ShoalEmbeddedException(
              OPERATION, "UNAVAILABLE", origin + " names " + path + ", which is not a file");
        }
        systemLoad(path, origin);
        loadedFrom = path.toString();
        return;
      }
      Path extracted = extractResource();
      systemLoad(extracted, "the jar resource " + RESOURCE + " (extracted to " + extracted + ")");
      loadedFrom = "resource " + RESOURCE + " (extracted to " + extracted + ")";
    }
  }

  /**
   * Where the library was loaded from: the override path, or {@code "resource ... (extracted to
   * ...)"}; null before a successful {@link #load()}.
   *
   * @return a description of the loaded library's origin, or null
   */
  public static String loadedFrom() {
    return loadedFrom;
  }

  /**
   * The resource folder for a platform, or an exception naming it when no library is built for it.
   *
   * @param osName {@code os.name}
   * @param osArch {@code os.arch}
   * @return {@code "linux-x86_64"}
   * @throws ShoalEmbeddedException (code {@code UNAVAILABLE}) for any other platform
   */
  static String platformDirectory(String osName, String osArch) {
    String os = osName == null ? "" : osName.toLowerCase(Locale.ROOT);
    String arch = osArch == null ? "" : osArch.toLowerCase(Locale.ROOT);
    if (os.startsWith("linux") && (arch.equals("amd64") || arch.equals("x86_64"))) {
      return "linux-x86_64";
    }
    throw new ShoalEmbeddedException(
        OPERATION,
        "UNAVAILABLE",
        "shoal embedded mode ships a native library for linux-x86_64 only; this JVM runs on "
            + osName
            + " / "
            + osArch
            + ". Build native/jni for this platform (cargo build -p shoal-jni) and point the system"
            + " property "
            + LIBRARY_PROPERTY
            + " (or "
            + LIBRARY_ENV
            + ") at the library");
  }

  private static Path extractResource() {
    String osName = System.getProperty("os.name");
    String osArch = System.getProperty("os.arch");
    platformDirectory(osName, osArch);
    try (InputStream in = NativeLoader.class.getResourceAsStream(RESOURCE)) {
      if (in == null) {
        throw new ShoalEmbeddedException(
            OPERATION,
            "UNAVAILABLE",
            "the class path has no "
                + RESOURCE
                + " (platform "
                + osName
                + " / "
                + osArch
                + "): the shoal-embedded jar was built without its native library. Build it with"
                + " Maven (which runs cargo), or set the system property "
                + LIBRARY_PROPERTY
                + " (or "
                + LIBRARY_ENV
                + ") to the path of libshoal_jni.so");
      }
      Path file = Files.createTempFile("libshoal_jni-", ".so");
      file.toFile().deleteOnExit();
      Files.copy(in, file, StandardCopyOption.REPLACE_EXISTING);
      return file;
    } catch (IOException e) {
      throw new ShoalEmbeddedException(
          OPERATION,
          "UNAVAILABLE",
          "cannot extract " + RESOURCE + " to a temporary file: " + e.getMessage(),
          e);
    }
  }

  private static void systemLoad(Path path, String origin) {
    try {
      System.load(path.toString());
    } catch (UnsatisfiedLinkError | SecurityException e) {
      throw new ShoalEmbeddedException(
          OPERATION,
          "UNAVAILABLE",
          "cannot load " + path + " (from " + origin + "): " + e.getMessage(),
          e);
    }
  }
}
