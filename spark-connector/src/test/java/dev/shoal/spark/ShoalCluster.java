package dev.shoal.spark;

import java.io.IOException;
import java.net.ServerSocket;
import java.net.URI;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

import dev.shoal.client.ShoalClient;
import dev.shoal.client.testing.TargetMode;

/**
 * A cluster of real daemons on loopback (docs/deployment.md, "A cluster"): {@code nodes}
 * {@code shoal serve} processes sharing one membership list ({@code --cluster-nodes}), each with
 * its own data directory, and one table sharded over them ({@code create_table} with {@code
 * shard_key}). The connector's {@code endpoint} names node 0 only: plans send it to every node.
 */
final class ShoalCluster implements ShoalTarget {
  /** The nodes' shared secret ({@code --cluster-secret}): calls between nodes carry it. */
  static final String SECRET = java.util.UUID.randomUUID().toString().replace("-", "");

  private final List<ShoalDaemon> daemons;
  private final Path ownedDir;

  private ShoalCluster(List<ShoalDaemon> daemons, Path ownedDir) {
    this.daemons = daemons;
    this.ownedDir = ownedDir;
  }

  /** Starts {@code nodes} daemons under {@code dir} and shards {@code table} over them by {@code shardKey}. */
  static ShoalCluster start(Path dir, int nodes, String table, String shardKey) throws IOException, InterruptedException {
    List<Integer> ports = new ArrayList<>();
    for (int i = 0; i < nodes; i++) {
      try (ServerSocket socket = new ServerSocket(0)) {
        ports.add(socket.getLocalPort());
      }
    }
    String list = String.join(",", ports.stream().map(p -> "grpc://127.0.0.1:" + p).toList());
    List<ShoalDaemon> daemons = new ArrayList<>();
    ShoalCluster cluster = new ShoalCluster(daemons, dir);
    try {
      for (int i = 0; i < nodes; i++) {
        daemons.add(ShoalDaemon.startAt("127.0.0.1:" + ports.get(i), dir.resolve("node" + i),
            "--cluster-nodes", list, "--node-id", Integer.toString(i), "--cluster-secret", SECRET));
      }
      try (ShoalClient client = ShoalClient.open(URI.create(cluster.endpoint()), null)) {
        client.action("create_table", ShoalClient.JSON.createObjectNode().put("name", table).put("shard_key", shardKey), table);
      }
    } catch (IOException | InterruptedException | RuntimeException e) {
      cluster.close();
      throw e;
    }
    return cluster;
  }

  @Override
  public TargetMode mode() {
    return TargetMode.CLUSTER;
  }

  /** Node 0's location. */
  @Override
  public String endpoint() {
    return daemons.get(0).endpoint();
  }

  @Override
  public void close() throws InterruptedException {
    for (ShoalDaemon daemon : daemons) {
      daemon.close();
    }
    ShoalTarget.deleteTree(ownedDir);
  }
}
