package dev.shoal.spark;

import java.nio.file.Files;
import java.nio.file.Path;

import org.junit.jupiter.api.extension.AfterAllCallback;
import org.junit.jupiter.api.extension.BeforeAllCallback;
import org.junit.jupiter.api.extension.ExtensionContext;
import org.junit.jupiter.api.extension.ParameterContext;
import org.junit.jupiter.api.extension.ParameterResolver;

/**
 * JUnit 5 extension: one real daemon per test class (started before all tests, SIGTERM after),
 * injected as a {@link ShoalDaemon} parameter.
 */
public final class ShoalDaemonExtension implements BeforeAllCallback, AfterAllCallback, ParameterResolver {
  private static final ExtensionContext.Namespace NS = ExtensionContext.Namespace.create(ShoalDaemonExtension.class);

  @Override
  public void beforeAll(ExtensionContext context) throws Exception {
    Path dir = Files.createTempDirectory("shoal-spark-test");
    context.getStore(NS).put("daemon", ShoalDaemon.start(dir.resolve("data")));
  }

  @Override
  public void afterAll(ExtensionContext context) throws Exception {
    ShoalDaemon daemon = context.getStore(NS).remove("daemon", ShoalDaemon.class);
    if (daemon != null) {
      daemon.close();
    }
  }

  @Override
  public boolean supportsParameter(ParameterContext parameter, ExtensionContext extension) {
    return parameter.getParameter().getType() == ShoalDaemon.class;
  }

  @Override
  public Object resolveParameter(ParameterContext parameter, ExtensionContext extension) {
    return extension.getStore(NS).get("daemon", ShoalDaemon.class);
  }
}
