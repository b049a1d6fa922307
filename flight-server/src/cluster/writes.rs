//! Ingestion into a sharded table through any node: the node
//! splits each DoPut batch by the records' shard key ([`ShardedTable::shard_of`]),
//! ingests the rows of the shards it holds and forwards the others over one DoPut stream
//! per shard to the nodes holding them; a batch is acknowledged once every shard it
//! touched has acknowledged its rows (each under its own table's durability). The batch's
//! `app_metadata` goes with every part: a writer's serial reaches every shard (an empty
//! part where the batch has no rows for one, so that a resend is a duplicate everywhere),
//! a transaction's batch is staged on every shard it touches (`commit_transaction` on the
//! table commits it on every shard).
//!
//! Up to [`PIPELINE_DEPTH`] batches are in flight at once: each shard's rows go down its
//! lane in order (the put pipeline, `crate::put`, for a shard held here, a DoPut stream for a
//! remote one, whose acknowledgements come back in order), and the batches are answered in
//! order. It is still the slower way in (one more hop, every record's shard key read);
//! writers that know the shard map can send each record to its node directly.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{RecordBatch, UInt32Array};
use arrow_flight::decode::{DecodedPayload, FlightDataDecoder};
use arrow_flight::error::FlightError;
use arrow_flight::{FlightData, FlightDescriptor, PutResult, SchemaAsIpc};
use arrow_schema::{DataType, SchemaRef};
use futures::stream::FuturesOrdered;
use futures::{Stream, StreamExt, TryStreamExt};
use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot};
use tonic::{Status, Streaming};

use shoal_ops::catalog::{Catalog, TableEntry};
use shoal_ops::ops;
use shoal_ops::protocol::BatchMetadata;

use super::{Cluster, ShardedTable};
use crate::limits::Stop;
use crate::put::{self, PutBatch, PIPELINE_DEPTH};
use crate::rpc::{status, BoxedStream};

/// A shard's part of a batch: the shard, its rows, and the batch's row of each of them
/// (`None`: the whole batch, or an empty part).
type Part = (usize, RecordBatch, Option<Vec<u32>>);

/// A shard's answer to its part of a batch, when it comes.
type PartReply = oneshot::Receiver<Result<Value, Status>>;

/// The queue of parts waiting for their answers, which come back in order.
type Waiting = mpsc::UnboundedSender<oneshot::Sender<Result<Value, Status>>>;

/// Where one shard's rows of a stream go.
enum Lane {
    /// A shard held here: the put pipeline into its table ([`crate::put`]).
    Local { entry: Arc<TableEntry>, work: mpsc::Sender<Result<PutBatch, Status>>, waiting: Waiting },
    /// A DoPut stream to the node holding the shard.
    Remote { sender: mpsc::Sender<FlightData>, waiting: Waiting },
}

impl Cluster {
    /// Routes a DoPut stream into the sharded `table` (see the module's documentation);
    /// `permit` is the stream's place among the open DoPut streams.
    pub fn put(
        self: &Arc<Self>,
        catalog: &Arc<Catalog>,
        table: Arc<ShardedTable>,
        messages: impl Stream<Item = Result<FlightData, Status>> + Send + 'static,
        permit: crate::limits::Place,
    ) -> BoxedStream<PutResult> {
        // Results through an outlet: a client that reads none of them for the idle timeout
        // loses the stream (and its place), with DEADLINE_EXCEEDED after what was queued.
        let (outlet, results) = crate::limits::outlet::<Result<PutResult, Status>>(PIPELINE_DEPTH, permit.idle(), "DoPut", Err);
        let (cluster, catalog) = (Arc::clone(self), Arc::clone(catalog));
        tokio::spawn(async move {
            let _permit = permit;
            let sender = &outlet;
            let ended: Result<(), Stop> = async {
            let mut lanes: Vec<Option<Lane>> = (0..table.shards).map(|_| None).collect();
            let mut decoder = FlightDataDecoder::new(messages.map_err(FlightError::from));
            let mut schema: Option<SchemaRef> = None;
            let mut number = 0usize;
            let mut in_flight = FuturesOrdered::new();
            loop {
                // Answer batches as they are acknowledged while reading the next ones (a
                // client may wait for each answer before it sends more).
                tokio::select! {
                    biased;
                    Some(result) = in_flight.next(), if !in_flight.is_empty() => {
                        let result: Result<PutResult, Status> = result;
                        let failed = result.is_err();
                        sender.send(result).await?;
                        if failed {
                            return Ok(());
                        }
                    }
                    message = decoder.next(), if in_flight.len() < PIPELINE_DEPTH => {
                        let Some(message) = message else { break };
                        let dispatched = async {
                            let message = message.map_err(Status::from)?;
                            match message.payload {
                                DecodedPayload::Schema(s) => {
                                    ops::check_put_schema(&s).map_err(status)?;
                                    schema = Some(s);
                                    Ok(None)
                                }
                                DecodedPayload::RecordBatch(batch) => {
                                    let metadata = message.inner.app_metadata.to_vec();
                                    let schema = schema.clone().unwrap_or_else(|| batch.schema());
                                    let answer = cluster.dispatch(&catalog, &table, &mut lanes, &schema, &batch, &metadata, number).await?;
                                    number += 1;
                                    Ok(Some(answer))
                                }
                                DecodedPayload::None => Ok(None),
                            }
                        }
                        .await;
                        match dispatched {
                            Ok(None) => {}
                            Ok(Some(answer)) => in_flight.push_back(answer),
                            Err(e) => {
                                // The batches before it are answered first, then the error.
                                while let Some(result) = in_flight.next().await {
                                    sender.send(result).await?;
                                }
                                return sender.send(Err(e)).await;
                            }
                        }
                    }
                }
            }
            while let Some(result) = in_flight.next().await {
                let failed = result.is_err();
                sender.send(result).await?;
                if failed {
                    return Ok(());
                }
            }
            Ok(())
            }
            .await;
            match ended {
                Err(Stop::Stalled) => outlet.stall(),
                Ok(()) | Err(Stop::Gone) => outlet.finish(),
            }
        });
        Box::pin(results)
    }

    /// Splits one batch over the shards and sends each part down its lane; the future of
    /// the batch's PutResult (every part acknowledged).
    #[allow(clippy::too_many_arguments)]
    async fn dispatch(
        &self,
        catalog: &Arc<Catalog>,
        table: &ShardedTable,
        lanes: &mut [Option<Lane>],
        schema: &SchemaRef,
        batch: &RecordBatch,
        metadata: &[u8],
        number: usize,
    ) -> Result<impl std::future::Future<Output = Result<PutResult, Status>> + Send + 'static, Status> {
        let parsed = BatchMetadata::parse(metadata).map_err(|e| status(e.context(format_args!("table {:?}, DoPut batch {number}", table.name))))?;
        let parts = self.split(table, batch, parsed.writer.is_some())?;
        let mut replies: Vec<(usize, usize, Option<Vec<u32>>, PartReply)> = Vec::with_capacity(parts.len());
        for (shard, part, rows) in parts {
            let node = table.node_of(shard);
            if lanes[shard].is_none() {
                lanes[shard] = Some(self.open_lane(catalog, table, shard, schema).await.map_err(|e| self.peer_error(&table.name, Some(shard), node, &e))?);
            }
            let Some(lane) = &lanes[shard] else { unreachable!("the lane was just opened") };
            if node != self.me {
                self.count_forwarded(part.num_rows());
            }
            let reply = send_part(lane, schema, part, &parsed, metadata, number).await;
            replies.push((shard, node, rows, reply));
        }
        let (name, locations): (String, Vec<String>) = (table.name.clone(), self.nodes.clone());
        Ok(async move {
            let mut answers = Vec::with_capacity(replies.len());
            let mut failure: Option<Status> = None;
            for (shard, node, rows, reply) in replies {
                let answer = reply.await.unwrap_or_else(|_| Err(Status::unavailable("the shard's stream ended before it acknowledged the batch")));
                match answer {
                    Ok(mut answer) => {
                        answer["shard"] = json!(shard);
                        answer["node"] = json!(node);
                        answers.push(answer);
                    }
                    Err(e) if failure.is_none() => {
                        let location = locations.get(node).map_or("", String::as_str);
                        let message = rows.as_deref().map_or_else(|| e.message().to_owned(), |rows| record_of_the_batch(e.message(), rows));
                        failure = Some(Status::new(
                            super::broken_code(&e),
                            format!("DoPut batch {number}: table {name:?}, shard {shard} on node {node} ({location}): {message}"),
                        ));
                    }
                    Err(_) => {}
                }
            }
            if let Some(failure) = failure {
                return Err(failure);
            }
            let sum = |field: &str| answers.iter().filter_map(|a| a.get(field).and_then(Value::as_u64)).sum::<u64>();
            let mut reply = json!({"batch": number, "records": sum("records"), "skipped": sum("skipped")});
            if parsed.transaction.is_some() {
                reply["staged"] = json!(sum("staged"));
                reply["transaction"] = json!(parsed.transaction);
            }
            if let (Some(writer), Some(serial)) = (&parsed.writer, parsed.serial) {
                reply["writer"] = json!(writer);
                reply["serial"] = json!(serial);
                reply["duplicate"] = json!(answers.iter().all(|a| a.get("duplicate").and_then(Value::as_bool) == Some(true)));
            }
            reply["shards"] = Value::Array(answers);
            Ok(PutResult { app_metadata: reply.to_string().into() })
        })
    }

    /// The lane of `shard`: an ingestion worker for its table here, or a DoPut stream to
    /// its node.
    async fn open_lane(&self, catalog: &Arc<Catalog>, table: &ShardedTable, shard: usize, schema: &SchemaRef) -> Result<Lane, Status> {
        let node = table.node_of(shard);
        let name = table.shard_table(shard);
        if node == self.me {
            let entry = catalog.get(&name).map_err(status)?;
            let (work, batches) = mpsc::channel::<Result<PutBatch, Status>>(PIPELINE_DEPTH);
            // The routed stream holds its place for its life: the parts hold none. Its
            // durability waits end with the stream (no client waits on this lane alone).
            let mut answers = put::ingest_in_order(batches, || false);
            let (waiting, mut waiters) = mpsc::unbounded_channel::<oneshot::Sender<Result<Value, Status>>>();
            tokio::spawn(async move {
                // The pipeline answers the parts in the order they were sent.
                while let Some(waiter) = waiters.recv().await {
                    let answer = answers.recv().await.unwrap_or_else(|| Err(Status::internal("the shard's ingestion stopped before it answered the batch")));
                    let failed = answer.is_err();
                    let _ = waiter.send(answer);
                    if failed {
                        return; // the waiters behind it see their sender dropped
                    }
                }
            });
            return Ok(Lane::Local { entry, work, waiting });
        }
        let (sender, receiver) = mpsc::channel::<FlightData>(4 * PIPELINE_DEPTH);
        let mut first: FlightData = SchemaAsIpc::new(schema, &arrow_ipc::writer::IpcWriteOptions::default()).into();
        first.flight_descriptor = Some(FlightDescriptor::new_path(vec![name]));
        // The daemon reads the first message before it answers the call: queue it first.
        sender.send(first).await.map_err(|_| Status::internal("the forwarding stream closed"))?;
        let mut client = self.peer(node)?;
        let mut results: Streaming<PutResult> = client.do_put(self.request(tokio_stream::wrappers::ReceiverStream::new(receiver), None)).await?.into_inner();
        let (waiting, mut waiters) = mpsc::unbounded_channel::<oneshot::Sender<Result<Value, Status>>>();
        tokio::spawn(async move {
            // The node answers the parts in the order they were sent.
            while let Some(waiter) = waiters.recv().await {
                let answer = match results.message().await {
                    Ok(Some(result)) => serde_json::from_slice::<Value>(&result.app_metadata)
                        .map_err(|e| Status::internal(format!("the node's PutResult is not JSON: {e}"))),
                    Ok(None) => Err(Status::unavailable("the node ended the stream without acknowledging the batch")),
                    Err(e) => Err(e),
                };
                let failed = answer.is_err();
                let _ = waiter.send(answer);
                if failed {
                    return; // the waiters behind it see their sender dropped
                }
            }
        });
        Ok(Lane::Remote { sender, waiting })
    }
    /// Each shard's rows of `batch` (in their order), for the shards it has rows for —
    /// or for every shard when `every_shard` (a writer's batch).
    fn split(&self, table: &ShardedTable, batch: &RecordBatch, every_shard: bool) -> Result<Vec<Part>, Status> {
        let mut rows: Vec<Vec<u32>> = vec![Vec::new(); table.shards];
        if table.shard_key.is_empty() {
            let shard = self.spread.fetch_add(1, Ordering::Relaxed) % table.shards;
            return Ok((0..table.shards)
                .filter(|&s| s == shard || every_shard)
                .map(|s| (s, if s == shard { batch.clone() } else { batch.slice(0, 0) }, None))
                .collect());
        }
        let column = batch.column_by_name("json").ok_or_else(|| Status::invalid_argument("DoPut: the batch has no `json` column"))?;
        let record = |row: usize| -> Option<&[u8]> {
            if column.is_null(row) {
                return None;
            }
            Some(match column.data_type() {
                DataType::Utf8 => column.as_string::<i32>().value(row).as_bytes(),
                DataType::LargeUtf8 => column.as_string::<i64>().value(row).as_bytes(),
                DataType::Binary => column.as_binary::<i32>().value(row),
                DataType::LargeBinary => column.as_binary::<i64>().value(row),
                _ => return None,
            })
        };
        for row in 0..batch.num_rows() {
            // A null or untyped row goes to shard 0, whose table reports it.
            let shard = record(row).map_or(0, |bytes| table.shard_of(bytes));
            rows[shard].push(u32::try_from(row).map_err(|_| Status::invalid_argument("DoPut: a batch of more than 2^32 rows"))?);
        }
        let mut parts = Vec::new();
        for (shard, indices) in rows.into_iter().enumerate() {
            if indices.is_empty() && !every_shard {
                continue;
            }
            let part = arrow_select::take::take_record_batch(batch, &UInt32Array::from(indices.clone()))
                .map_err(|e| Status::internal(format!("splitting a batch by shard: {e}")))?;
            parts.push((shard, part, Some(indices)));
        }
        Ok(parts)
    }
}

/// A shard's error `message` about "record N of the batch" (N counted in the shard's part)
/// with N counted in the whole batch instead (`rows`: the batch's row of each row of the
/// part), so that a writer can name the record it sent.
fn record_of_the_batch(message: &str, rows: &[u32]) -> String {
    const BEFORE: &str = "record ";
    const AFTER: &str = " of the batch";
    let mut from = 0;
    while let Some(found) = message[from..].find(BEFORE) {
        let start = from + found + BEFORE.len();
        let digits = message[start..].bytes().take_while(u8::is_ascii_digit).count();
        let end = start + digits;
        if digits > 0 && message[end..].starts_with(AFTER) {
            if let Some(row) = message[start..end].parse::<usize>().ok().and_then(|n| rows.get(n)) {
                return format!("{}{row}{}", &message[..start], &message[end..]);
            }
        }
        from = start;
    }
    message.to_owned()
}

/// Sends `part` down `lane`; its acknowledgement, when it comes.
async fn send_part(lane: &Lane, schema: &SchemaRef, part: RecordBatch, metadata: &BatchMetadata, raw: &[u8], number: usize) -> PartReply {
    let (reply, answer) = oneshot::channel();
    match lane {
        Lane::Local { entry, work, waiting } => {
            if waiting.send(reply).is_err() {
                return answer; // the answers stopped: the reply was dropped, the part fails
            }
            let batch = PutBatch { entry: Arc::clone(entry), batch: part, metadata: metadata.clone(), number, place: None };
            // A pipeline that stopped answers the waiting parts (or drops their replies).
            let _ = work.send(Ok(batch)).await;
        }
        Lane::Remote { sender, waiting } => {
            let messages = match arrow_flight::utils::batches_to_flight_data(schema, [&part]) {
                Ok(messages) => messages,
                Err(e) => {
                    let _ = reply.send(Err(Status::internal(format!("encoding a batch to forward: {e}"))));
                    return answer;
                }
            };
            if waiting.send(reply).is_err() {
                return answer; // the reader stopped: the reply was dropped, the part fails
            }
            let count = messages.len();
            for (i, mut message) in messages.into_iter().enumerate().skip(1) {
                // The first is the schema, which went with the stream's first message.
                if i + 1 == count {
                    message.app_metadata = raw.to_vec().into();
                }
                if sender.send(message).await.is_err() {
                    break; // the stream broke: the reader answers the waiting parts
                }
            }
        }
    }
    answer
}

#[cfg(test)]
mod tests {
    use super::record_of_the_batch;

    /// A shard's "record N of the batch" names the record's row in the batch the writer sent.
    #[test]
    fn a_rejected_record_is_numbered_in_the_whole_batch() {
        let rows = [2, 5, 9];
        assert_eq!(
            record_of_the_batch("table \"t.shard-1\", DoPut batch 0: record 1 of the batch is not valid JSON: x", &rows),
            "table \"t.shard-1\", DoPut batch 0: record 5 of the batch is not valid JSON: x"
        );
        assert_eq!(record_of_the_batch("the record 7 of the batch", &rows), "the record 7 of the batch");
        assert_eq!(record_of_the_batch("no record here", &rows), "no record here");
    }
}
