package dev.shoal.embedded;

import java.nio.file.Path;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;


/**
 * Embedded engines shared by the connectors of one JVM, one per data directory, kept open for a
 * while after their last user.
 *
 * <p>Every client (a Spark reader or writer, a Flink writer or committer) takes its own {@link
 * ShoalEmbedded} handle from {@link #acquire}; the native layer shares one engine among the handles
 * of a directory and closes it (flush, checkpoint, LOCK released) with the last one. Connectors open
 * and close clients all the time (schema, plan, one per task), so without more the engine would be
 * recovered and checkpointed for every query. While clients are open, and for {@code
 * keepAliveMillis} after the last one was {@link #release}d, this class holds one more handle (the
 * keeper) that keeps the engine open. A JVM shutdown closes the keepers (the engine flushes and
 * checkpoints).
 */
public final class EmbeddedEngines {
  private static final System.Logger LOG = System.getLogger(EmbeddedEngines.class.getName());

  /** A directory's keeper handle and the clients currently open on it. */
  private static final class Entry {
    final ShoalEmbedded keeper;
    int clients;
    long keepAliveMillis;
    ScheduledFuture<?> pendingClose;

    Entry(ShoalEmbedded keeper) {
      this.keeper = keeper;
    }
  }

  private static final Map<Path, Entry> ENGINES = new HashMap<>();
  private static ScheduledExecutorService timer;
  private static boolean shutdownHookAdded;

  private EmbeddedEngines() {}

  /**
   * A new handle on the engine of {@code dataDir}, opening the engine (and a keeper handle, when
   * {@code keepAliveMillis > 0}) if it is not open.
   *
   * @param dataDir the data directory (absolute, normalised: it is the key)
   * @param config the engine's options (the daemon's configuration keys, as text; see {@link
   *     #engineOptions})
   * @param keepAliveMillis how long the engine stays open after its last client (0: closes with it)
   * @return a new handle; give it back with {@link #release}
   * @throws ShoalEmbeddedException as {@link ShoalEmbedded#open(Path, Map)}
   */
  public static synchronized ShoalEmbedded acquire(Path dataDir, Map<String, String> config, long keepAliveMillis) {
    Map<String, Object> options = engineOptions(config);
    Entry entry = ENGINES.get(dataDir);
    if (entry == null && keepAliveMillis > 0) {
      entry = new Entry(ShoalEmbedded.open(dataDir, options));
      ENGINES.put(dataDir, entry);
      addShutdownHook();
    }
    ShoalEmbedded handle;
    try {
      handle = ShoalEmbedded.open(dataDir, options);
    } catch (RuntimeException e) {
      if (entry != null && entry.clients == 0) {
        ENGINES.remove(dataDir);
        closeQuietly(dataDir, entry.keeper);
      }
      throw e;
    }
    if (entry != null) {
      entry.clients++;
      entry.keepAliveMillis = Math.max(keepAliveMillis, entry.keepAliveMillis);
      if (entry.pendingClose != null) {
        entry.pendingClose.cancel(false);
        entry.pendingClose = null;
      }
    }
    return handle;
  }

  /**
   * Closes a client's handle; when it was the last client of its directory, the keeper closes
   * after the keep-alive (unless a client comes first).
   */
  public static void release(Path dataDir, ShoalEmbedded handle) {
    try {
      handle.close();
    } finally {
      synchronized (EmbeddedEngines.class) {
        Entry entry = ENGINES.get(dataDir);
        if (entry != null && entry.clients > 0 && --entry.clients == 0) {
          entry.pendingClose = timer().schedule(() -> closeIfIdle(dataDir, entry), entry.keepAliveMillis, TimeUnit.MILLISECONDS);
        }
      }
    }
  }

  /**
   * Closes the keeper of {@code dataDir} now if no client is open on it (the engine then closes
   * when its last handle does). Returns whether this JVM's connector holds no more handle there.
   */
  public static synchronized boolean closeIdle(Path dataDir) {
    Entry entry = ENGINES.get(dataDir);
    if (entry == null) {
      return true;
    }
    if (entry.clients > 0) {
      return false;
    }
    closeIfIdle(dataDir, entry);
    return true;
  }

  private static synchronized void closeIfIdle(Path dataDir, Entry entry) {
    // Under the class lock: an acquire waits until the engine has released the directory,
    // instead of finding it still locked by the closing engine.
    if (ENGINES.get(dataDir) == entry && entry.clients == 0) {
      ENGINES.remove(dataDir);
      if (entry.pendingClose != null) {
        entry.pendingClose.cancel(false);
      }
      closeQuietly(dataDir, entry.keeper);
    }
  }

  private static void closeQuietly(Path dataDir, ShoalEmbedded store) {
    try {
      store.close();
    } catch (RuntimeException e) {
      LOG.log(System.Logger.Level.WARNING, "shoal embedded engine on {0}: close failed: {1}", dataDir, e.getMessage());
    }
  }

  private static synchronized void closeAll() {
    for (Map.Entry<Path, Entry> e : new LinkedHashMap<>(ENGINES).entrySet()) {
      ENGINES.remove(e.getKey());
      closeQuietly(e.getKey(), e.getValue().keeper);
    }
  }

  private static void addShutdownHook() {
    if (!shutdownHookAdded) {
      shutdownHookAdded = true;
      Runtime.getRuntime().addShutdownHook(new Thread(EmbeddedEngines::closeAll, "shoal-embedded-shutdown"));
    }
  }

  private static synchronized ScheduledExecutorService timer() {
    if (timer == null) {
      timer = Executors.newSingleThreadScheduledExecutor(r -> {
        Thread t = new Thread(r, "shoal-embedded-keep-alive");
        t.setDaemon(true);
        return t;
      });
    }
    return timer;
  }

  /**
   * The {@code embedded.config.*} options as the engine's configuration: {@code true}/{@code false}
   * become booleans, integers numbers, everything else stays text (the engine names a key with a
   * wrong type).
   */
  public static Map<String, Object> engineOptions(Map<String, String> config) {
    Map<String, Object> options = new LinkedHashMap<>();
    for (Map.Entry<String, String> e : config.entrySet()) {
      String value = e.getValue().trim();
      Object parsed = value;
      if (value.equalsIgnoreCase("true") || value.equalsIgnoreCase("false")) {
        parsed = Boolean.parseBoolean(value);
      } else if (value.matches("-?\\d{1,18}")) {
        parsed = Long.parseLong(value);
      }
      options.put(e.getKey(), parsed);
    }
    return options;
  }
}
