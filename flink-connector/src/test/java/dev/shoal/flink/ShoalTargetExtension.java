package dev.shoal.flink;

import java.util.List;
import dev.shoal.client.testing.TargetMode;
import org.junit.jupiter.api.extension.AfterAllCallback;
import org.junit.jupiter.api.extension.BeforeAllCallback;
import org.junit.jupiter.api.extension.ExtensionContext;
import org.junit.platform.commons.support.AnnotationSupport;

/**
 * JUnit 5 extension and {@link ShoalTarget}: one shoal per test class, of the mode the class is
 * annotated with ({@link ShoalMode}), started before all its tests and stopped after. An abstract
 * test class registers it as a static field and uses it as its shoal; each mode's subclass only
 * carries the annotation (and the tests of its mode alone):
 *
 * <pre>{@code
 * abstract class ShoalSinkITCase {
 *   @RegisterExtension static final ShoalTargetExtension SHOAL = new ShoalTargetExtension();
 *   ... SHOAL.endpoint() ... SHOAL.column(table, "id") ...
 * }
 * @ShoalMode(TargetMode.EMBEDDED) class ShoalSinkEmbeddedITCase extends ShoalSinkITCase {}
 * }</pre>
 *
 * <p>The subclasses share the static field and run one after the other (the test classes of a
 * module run sequentially), each with a target of its own.
 */
public final class ShoalTargetExtension implements BeforeAllCallback, AfterAllCallback, ShoalTarget {

  private final String token;
  /** The mode; null: the test class's {@link ShoalMode}. */
  private final TargetMode fixedMode;
  private ShoalTarget target;

  public ShoalTargetExtension() {
    this(null);
  }

  /** A daemon is started with {@code --auth-token token} (null: none); embedded mode has no token. */
  public ShoalTargetExtension(String token) {
    this(token, null);
  }

  /** A target of {@code mode} whatever the class's annotation (e.g. chosen by a system property). */
  public ShoalTargetExtension(String token, TargetMode mode) {
    this.token = token;
    this.fixedMode = mode;
  }

  /** The mode {@code testClass} (or a superclass) is annotated with. */
  public static TargetMode modeOf(Class<?> testClass) {
    return AnnotationSupport.findAnnotation(testClass, ShoalMode.class)
        .orElseThrow(() -> new IllegalStateException(testClass.getName() + " has no @ShoalMode: which shoal should it run against?"))
        .value();
  }

  /** A target of {@code mode}, not started. */
  public static ShoalTarget create(TargetMode mode, String token) {
    return switch (mode) {
      case DAEMON -> new ShoalDaemon(token);
      case EMBEDDED -> new EmbeddedShoal();
      case CLUSTER -> new ShoalCluster(3);
    };
  }

  @Override
  public void beforeAll(ExtensionContext context) throws Exception {
    target = create(fixedMode != null ? fixedMode : modeOf(context.getRequiredTestClass()), token);
    target.start();
  }

  @Override
  public void afterAll(ExtensionContext context) throws Exception {
    ShoalTarget stopping = target;
    target = null;
    if (stopping != null) {
      stopping.stop();
    }
  }

  private ShoalTarget target() {
    if (target == null) {
      throw new IllegalStateException("no shoal is running (outside a test class's lifetime)");
    }
    return target;
  }

  /** The daemon of a {@code DAEMON} class (for its daemon-only tests). */
  public ShoalDaemon daemon() {
    return (ShoalDaemon) target();
  }

  /** The cluster of a {@code CLUSTER} class. */
  public ShoalCluster cluster() {
    return (ShoalCluster) target();
  }

  /** The embedded data directory of an {@code EMBEDDED} class. */
  public EmbeddedShoal embedded() {
    return (EmbeddedShoal) target();
  }

  @Override
  public TargetMode mode() {
    return target().mode();
  }

  @Override
  public String endpoint() {
    return target().endpoint();
  }

  @Override
  public void start() {
    throw new UnsupportedOperationException("started by JUnit (beforeAll)");
  }

  @Override
  public void stop() {
    throw new UnsupportedOperationException("stopped by JUnit (afterAll)");
  }

  @Override
  public void createTable(String name, String onInvalidJson) {
    target().createTable(name, onInvalidJson);
  }

  @Override
  public String action(String type, String body) {
    return target().action(type, body);
  }

  @Override
  public List<String> column(String table, String column) throws Exception {
    return target().column(table, column);
  }
}
