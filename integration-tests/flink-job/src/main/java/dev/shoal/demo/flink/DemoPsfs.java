package dev.shoal.demo.flink;

import java.util.List;

import com.fasterxml.jackson.databind.node.ObjectNode;

/**
 * FishStore's GitHub PSFs (SIGMOD 2019, §7): field projections on {@code id}, {@code actor.id},
 * {@code repo.id} and {@code type}, and the two predicates of its GitHub queries. The Spark half
 * of the demo and the end-to-end test refer to them by these names.
 */
final class DemoPsfs {
  private DemoPsfs() {}

  static List<ObjectNode> all() {
    return List.of(
        projection("id", "id"),
        projection("actor_id", "actor.id"),
        projection("repo_id", "repo.id"),
        projection("type", "type"),
        predicate("issues_opened", "type = 'IssuesEvent' AND payload.action = 'opened'"),
        predicate("cpp_pull_requests", "type = 'PullRequestEvent' AND payload.pull_request.head.repo.language = 'C++'"));
  }

  private static ObjectNode projection(String name, String field) {
    return ShoalAdmin.JSON.createObjectNode().put("name", name).put("kind", "projection").put("field", field);
  }

  private static ObjectNode predicate(String name, String expr) {
    return ShoalAdmin.JSON.createObjectNode().put("name", name).put("kind", "predicate").put("expr", expr);
  }

  static String describe(ObjectNode psf) {
    return psf.path("kind").asText().equals("projection")
        ? "projection " + psf.path("field").asText()
        : "predicate  " + psf.path("expr").asText();
  }
}
