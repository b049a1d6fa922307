package dev.shoal.flink.catalog;

import java.util.Set;

import dev.shoal.flink.table.ShoalConnectorOptions;
import org.apache.flink.configuration.ConfigOption;
import org.apache.flink.configuration.ConfigOptions;
import org.apache.flink.table.catalog.Catalog;
import org.apache.flink.table.factories.CatalogFactory;
import org.apache.flink.table.factories.FactoryUtil;

/**
 * {@code CREATE CATALOG shoal WITH ('type' = 'shoal', 'endpoint' = 'grpc://host:port' [, 'token' =
 * '...'] [, 'default-database' = 'default'])}: a {@link ShoalCatalog}.
 */
public final class ShoalCatalogFactory implements CatalogFactory {
  /** {@code 'type'} of the catalog. */
  public static final String IDENTIFIER = "shoal";

  /** The name of the catalog's one database. */
  public static final ConfigOption<String> DEFAULT_DATABASE =
      ConfigOptions.key("default-database")
          .stringType()
          .defaultValue("default")
          .withDescription("The name of the catalog's one database, which holds every table of the endpoint.");

  @Override
  public String factoryIdentifier() {
    return IDENTIFIER;
  }

  @Override
  public Set<ConfigOption<?>> requiredOptions() {
    return Set.of(ShoalConnectorOptions.ENDPOINT);
  }

  @Override
  public Set<ConfigOption<?>> optionalOptions() {
    return Set.of(ShoalConnectorOptions.TOKEN, DEFAULT_DATABASE);
  }

  @Override
  public Catalog createCatalog(Context context) {
    FactoryUtil.CatalogFactoryHelper helper = FactoryUtil.createCatalogFactoryHelper(this, context);
    helper.validate();
    return new ShoalCatalog(
        context.getName(),
        helper.getOptions().get(DEFAULT_DATABASE),
        helper.getOptions().get(ShoalConnectorOptions.ENDPOINT),
        helper.getOptions().getOptional(ShoalConnectorOptions.TOKEN).orElse(null));
  }
}
