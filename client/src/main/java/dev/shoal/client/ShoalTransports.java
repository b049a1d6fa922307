package dev.shoal.client;

import java.util.Locale;
import java.util.Map;
import java.util.ServiceConfigurationError;
import java.util.ServiceLoader;
import java.util.concurrent.ConcurrentHashMap;

/**
 * The {@link ShoalTransport}s on the class path, by scheme: those the client's own class loader
 * sees (looked up once), else those of the calling thread's context class loader (looked up each
 * time: a job's class loader may differ from the one that loaded the client).
 */
final class ShoalTransports {
  private static volatile Map<String, ShoalTransport> own;

  private ShoalTransports() {}

  /**
   * The transport of {@code scheme}.
   *
   * @throws IllegalStateException when there is none on the class path
   */
  static ShoalTransport of(String scheme) {
    String key = scheme.toLowerCase(Locale.ROOT);
    Map<String, ShoalTransport> loaded = own;
    if (loaded == null) {
      loaded = own = load(ShoalTransport.class.getClassLoader());
    }
    ShoalTransport transport = loaded.get(key);
    ClassLoader context = Thread.currentThread().getContextClassLoader();
    if (transport == null && context != null && context != ShoalTransport.class.getClassLoader()) {
      transport = load(context).get(key);
    }
    if (transport == null) {
      throw new IllegalStateException("no transport for " + scheme + ": endpoints on the class path (" + scheme
          + ": endpoints need the shoal-embedded jar, dev.shoal:shoal-embedded)");
    }
    return transport;
  }

  private static Map<String, ShoalTransport> load(ClassLoader loader) {
    Map<String, ShoalTransport> transports = new ConcurrentHashMap<>();
    try {
      for (ShoalTransport transport : ServiceLoader.load(ShoalTransport.class, loader)) {
        transports.putIfAbsent(transport.scheme().toLowerCase(Locale.ROOT), transport);
      }
    } catch (ServiceConfigurationError e) {
      throw new IllegalStateException("shoal client: a transport on the class path cannot be loaded: " + e, e);
    }
    return transports;
  }
}
