package dev.shoal.flink;

import java.lang.annotation.ElementType;
import java.lang.annotation.Inherited;
import java.lang.annotation.Retention;
import java.lang.annotation.RetentionPolicy;
import java.lang.annotation.Target;

import dev.shoal.client.testing.TargetMode;

/**
 * The mode a concrete test class runs its (inherited) tests in: {@link ShoalTargetExtension}
 * starts a {@link ShoalTarget} of this mode for the class.
 */
@Retention(RetentionPolicy.RUNTIME)
@Target(ElementType.TYPE)
@Inherited
public @interface ShoalMode {
  TargetMode value();
}
