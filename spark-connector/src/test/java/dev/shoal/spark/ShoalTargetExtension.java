package dev.shoal.spark;

import dev.shoal.client.testing.TargetMode;
import org.junit.jupiter.api.extension.AfterAllCallback;
import org.junit.jupiter.api.extension.BeforeAllCallback;
import org.junit.jupiter.api.extension.ExtensionContext;
import org.junit.jupiter.api.extension.ParameterContext;
import org.junit.jupiter.api.extension.ParameterResolver;

/**
 * JUnit 5 extension: one shoal per test class — a daemon process, or an embedded data directory —
 * started before all tests and stopped after, injected as a {@link ShoalTarget} parameter. Each
 * mode's subclass of a test class registers it:
 *
 * <pre>{@code
 * class ShoalPushdownEmbeddedTest extends ShoalPushdownTest {
 *   @RegisterExtension static final ShoalTargetExtension TARGET = new ShoalTargetExtension(TargetMode.EMBEDDED);
 * }
 * }</pre>
 */
public final class ShoalTargetExtension implements BeforeAllCallback, AfterAllCallback, ParameterResolver {
  private static final ExtensionContext.Namespace NS = ExtensionContext.Namespace.create(ShoalTargetExtension.class);

  private final TargetMode mode;

  public ShoalTargetExtension(TargetMode mode) {
    this.mode = mode;
  }

  @Override
  public void beforeAll(ExtensionContext context) throws Exception {
    context.getStore(NS).put("target", ShoalTarget.start(mode));
  }

  @Override
  public void afterAll(ExtensionContext context) throws Exception {
    ShoalTarget target = context.getStore(NS).remove("target", ShoalTarget.class);
    if (target != null) {
      target.close();
    }
  }

  @Override
  public boolean supportsParameter(ParameterContext parameter, ExtensionContext extension) {
    return parameter.getParameter().getType() == ShoalTarget.class;
  }

  @Override
  public Object resolveParameter(ParameterContext parameter, ExtensionContext extension) {
    return extension.getStore(NS).get("target", ShoalTarget.class);
  }
}
