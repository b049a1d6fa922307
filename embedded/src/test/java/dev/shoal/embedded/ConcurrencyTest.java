package dev.shoal.embedded;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.stream.Collectors;
import java.util.stream.LongStream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** One store used from many threads at once: writers, readers, PSF changes, and a racing close. */
class ConcurrencyTest {
  private static final int WRITERS = 4;
  private static final int BATCHES = 25;
  private static final int BATCH = 200;

  @TempDir Path dir;

  private static List<String> batch(int writer, int batch) {
    List<String> records = new ArrayList<>(BATCH);
    for (int i = 0; i < BATCH; i++) {
      long seq = (long) batch * BATCH + i;
      records.add("{\"writer\":\"w" + writer + "\",\"seq\":" + seq + ",\"parity\":" + (seq % 2) + "}");
    }
    return records;
  }

  @Test
  void writers_readers_and_psf_changes_in_parallel_lose_and_duplicate_nothing() throws Exception {
    ExecutorService pool = Executors.newFixedThreadPool(WRITERS + 3);
    try (ShoalEmbedded shoal = ShoalEmbedded.open(dir)) {
      shoal.createTable("t");
      CountDownLatch start = new CountDownLatch(1);
      // Scans name the column "seq", which the table knows once a record with it is in.
      CountDownLatch firstBatch = new CountDownLatch(1);
      AtomicBoolean writing = new AtomicBoolean(true);
      List<Future<?>> writers = new ArrayList<>();
      ConcurrentLinkedQueue<Long> counts = new ConcurrentLinkedQueue<>();
      for (int w = 0; w < WRITERS; w++) {
        int writer = w;
        writers.add(pool.submit(() -> {
          start.await();
          for (int b = 0; b < BATCHES; b++) {
            if (b == BATCHES - 1) {
              // The readers' scans overlap the writes whatever the scheduling: the last batch
              // waits for a few of them.
              long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
              while (counts.size() < 4) {
                assertTrue(System.nanoTime() < deadline, "the readers scanned within 60 s: " + counts.size());
                Thread.sleep(1);
              }
            }
            assertEquals(BATCH, shoal.ingest("t", batch(writer, b)).records());
            firstBatch.countDown();
          }
          return null;
        }));
      }
      List<Future<?>> others = new ArrayList<>();
      for (int r = 0; r < 2; r++) {
        others.add(pool.submit(() -> {
          firstBatch.await();
          long previous = 0;
          while (writing.get()) {
            long rows = shoal.scan("t", "parity = 0 OR parity = 1", List.of("seq"), null, root -> { });
            assertTrue(rows >= previous, "a later scan sees no fewer records: " + rows + " < " + previous);
            previous = rows;
            counts.add(rows);
          }
          return null;
        }));
      }
      others.add(pool.submit(() -> {
        start.await();
        shoal.registerPsf("t", "writer", Map.of("kind", "projection", "field", "writer"));
        Thread.sleep(20);
        shoal.registerPsf("t", "even", Map.of("kind", "predicate", "expr", "parity = 0"));
        Thread.sleep(20);
        shoal.deregisterPsf("t", "even");
        return null;
      }));
      start.countDown();
      for (Future<?> writer : writers) {
        writer.get(5, TimeUnit.MINUTES);
      }
      writing.set(false);
      for (Future<?> other : others) {
        other.get(5, TimeUnit.MINUTES);
      }
      System.out.printf("concurrency: %d scans while writing%n", counts.size());

      long total = (long) WRITERS * BATCHES * BATCH;
      assertEquals(total, shoal.stats("t").path("records").asLong());
      for (int w = 0; w < WRITERS; w++) {
        List<Long> seqs = new ArrayList<>();
        shoal.scan("t", "writer = 'w" + w + "'", List.of("seq"), null,
            root -> TestData.column(root, "seq").forEach(s -> seqs.add(Long.parseLong(s))));
        seqs.sort(null);
        assertEquals(LongStream.range(0, (long) BATCHES * BATCH).boxed().collect(Collectors.toList()), seqs, "writer w" + w);
      }
    } finally {
      pool.shutdownNow();
    }
  }

  @Test
  void a_close_racing_with_calls_fails_them_with_closed_and_nothing_else() throws Exception {
    ShoalEmbedded shoal = ShoalEmbedded.open(dir);
    shoal.createTable("t");
    shoal.ingest("t", batch(0, 0));
    ExecutorService pool = Executors.newFixedThreadPool(4);
    ConcurrentLinkedQueue<Throwable> unexpected = new ConcurrentLinkedQueue<>();
    CountDownLatch running = new CountDownLatch(4);
    List<Future<?>> callers = new ArrayList<>();
    for (int t = 0; t < 4; t++) {
      int thread = t;
      callers.add(pool.submit(() -> {
        running.countDown();
        for (int i = 0; ; i++) {
          try {
            if (thread % 2 == 0) {
              shoal.ingest("t", batch(thread, i));
            } else {
              shoal.scan("t", "seq < 10", List.of("seq"), null, root -> { });
            }
          } catch (ShoalEmbeddedException e) {
            if (!e.code().equals(ShoalEmbeddedException.CLOSED)) {
              unexpected.add(e);
            }
            return;
          } catch (Throwable e) {
            unexpected.add(e);
            return;
          }
        }
      }));
    }
    running.await();
    Thread.sleep(200);
    shoal.close();
    pool.shutdown();
    assertTrue(pool.awaitTermination(2, TimeUnit.MINUTES));
    for (Future<?> caller : callers) {
      caller.get();
    }
    assertTrue(unexpected.isEmpty(), unexpected.toString());
  }
}
