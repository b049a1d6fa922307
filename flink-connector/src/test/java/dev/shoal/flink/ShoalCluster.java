package dev.shoal.flink;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

import dev.shoal.client.testing.TargetMode;

/**
 * A cluster of real daemons on loopback (docs/deployment.md, "A cluster"): {@code nodes} {@code
 * shoal serve} processes sharing one membership list, each with its own data directory, every
 * one at a fixed port so that a node restarted after a kill is found again. {@link #createTable}
 * shards a table over every node by its {@code id}; the sink's {@code endpoint} is node 0, which
 * splits each batch by the shard key and forwards the other shards' rows. The nodes keep their
 * tables in a remote store (a directory, {@code --remote file://...}), so that a node can be
 * replaced on an empty directory and shards moved between nodes.
 */
public final class ShoalCluster implements ShoalTarget {
  /** The nodes' shared secret ({@code --cluster-secret}): calls between nodes carry it. */
  static final String SECRET = java.util.UUID.randomUUID().toString().replace("-", "");

  private final int size;
  private final List<ShoalDaemon> nodes = new ArrayList<>();
  private Path ownedDir;

  public ShoalCluster(int size) {
    this.size = size;
  }

  @Override
  public TargetMode mode() {
    return TargetMode.CLUSTER;
  }

  @Override
  public void start() throws Exception {
    ownedDir = Files.createTempDirectory("shoal-flink-cluster");
    List<Integer> ports = new ArrayList<>();
    for (int i = 0; i < size; i++) {
      ports.add(ShoalDaemon.freePort());
    }
    String list = String.join(",", ports.stream().map(p -> "grpc://127.0.0.1:" + p).toList());
    for (int i = 0; i < size; i++) {
      ShoalDaemon node = new ShoalDaemon(null, List.of("--cluster-nodes", list, "--node-id", Integer.toString(i),
          "--cluster-secret", SECRET, "--durability", "group_commit",
          "--remote", "file://" + ownedDir.resolve("store").toAbsolutePath(), "--remote-commit-ms", "20"), ports.get(i));
      nodes.add(node);
      node.start(ownedDir.resolve("node" + i));
    }
  }

  /** A data directory no node used yet (a node's replacement). */
  public Path freshDataDir(String name) {
    return ownedDir.resolve(name);
  }

  /** Node {@code i}. */
  public ShoalDaemon node(int i) {
    return nodes.get(i);
  }

  @Override
  public void stop() throws Exception {
    for (ShoalDaemon node : nodes) {
      node.stop();
    }
    nodes.clear();
    ShoalTarget.deleteTree(ownedDir);
    ownedDir = null;
  }

  /** Node 0's location. */
  @Override
  public String endpoint() {
    return nodes.get(0).endpoint();
  }

  /** {@code create_table} sharded over every node by {@code id}. */
  @Override
  public void createTable(String name, String onInvalidJson) {
    action("create_table", "{\"name\":\"" + name + "\",\"on_invalid_json\":\"" + onInvalidJson + "\",\"shard_key\":\"id\"}");
  }

  /** Through node 0 (a sharded table's actions fan out to every shard). */
  @Override
  public String action(String type, String body) {
    return nodes.get(0).action(type, body);
  }

  /** Through node 0, which serves every shard's endpoints (forwarding those it does not hold). */
  @Override
  public List<String> column(String table, String column) throws Exception {
    return nodes.get(0).column(table, column);
  }
}
