//! Ingestion into a sharded table through any node (scale-out issue, item 4): the node
//! splits each DoPut batch by the records' shard key ([`ShardedTable::shard_of`]),
//! ingests the rows of the shards it holds and forwards the others over one DoPut stream
//! per shard to the nodes holding them; a batch is acknowledged once every shard it
//! touched has acknowledged its rows (each under its own table's durability). The batch's
//! `app_metadata` goes with every part: a writer's serial reaches every shard (an empty
//! part where the batch has no rows for one, so that a resend is a duplicate everywhere),
//! a transaction's batch is staged on every shard it touches (`commit_transaction` on the
//! table commits it on every shard).
//!
//! This is the slower way in (one more hop, batches one at a time); writers that know
//! the shard map send each record to its node directly.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{RecordBatch, UInt32Array};
use arrow_flight::decode::{DecodedPayload, FlightDataDecoder};
use arrow_flight::error::FlightError;
use arrow_flight::{FlightData, FlightDescriptor, PutResult, SchemaAsIpc};
use arrow_schema::{DataType, SchemaRef};
use futures::future::join_all;
use futures::{Stream, StreamExt, TryStreamExt};
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tonic::{Status, Streaming};

use shoal_ops::catalog::Catalog;
use shoal_ops::ops;
use shoal_ops::protocol::BatchMetadata;

use super::{Cluster, ShardedTable};
use crate::service::{status, BoxedStream};

/// Where one shard's rows of a stream go.
enum Lane {
    /// A shard this node holds.
    Local(Arc<shoal_ops::catalog::TableEntry>),
    /// A DoPut stream to the node holding the shard.
    Remote { sender: mpsc::Sender<FlightData>, results: Box<Streaming<PutResult>> },
}

impl Cluster {
    /// Routes a DoPut stream into the sharded `table` (see the module's documentation);
    /// `permit` is the stream's place among the open DoPut streams.
    pub fn put(
        self: &Arc<Self>,
        catalog: &Arc<Catalog>,
        table: Arc<ShardedTable>,
        messages: impl Stream<Item = Result<FlightData, Status>> + Send + 'static,
        permit: tokio::sync::OwnedSemaphorePermit,
    ) -> BoxedStream<PutResult> {
        let (sender, receiver) = mpsc::channel::<Result<PutResult, Status>>(2);
        let (cluster, catalog) = (Arc::clone(self), Arc::clone(catalog));
        tokio::spawn(async move {
            let _permit = permit;
            let mut lanes: Vec<Option<Lane>> = (0..table.shards).map(|_| None).collect();
            let mut decoder = FlightDataDecoder::new(messages.map_err(FlightError::from));
            let mut schema: Option<SchemaRef> = None;
            let mut number = 0usize;
            while let Some(message) = decoder.next().await {
                let result = async {
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
                            let reply = cluster.put_batch(&catalog, &table, &mut lanes, &schema, &batch, &metadata, number).await?;
                            number += 1;
                            Ok(Some(PutResult { app_metadata: reply.to_string().into() }))
                        }
                        DecodedPayload::None => Ok(None),
                    }
                }
                .await;
                let failed = result.is_err();
                let result = match result {
                    Ok(None) => continue,
                    Ok(Some(answer)) => Ok(answer),
                    Err(e) => Err(e),
                };
                if sender.send(result).await.is_err() || failed {
                    return;
                }
            }
        });
        Box::pin(tokio_stream::wrappers::ReceiverStream::new(receiver))
    }

    /// Splits one batch over the shards, sends each part down its lane and waits for
    /// every part's acknowledgement; the batch's PutResult metadata.
    #[allow(clippy::too_many_arguments)]
    async fn put_batch(
        &self,
        catalog: &Arc<Catalog>,
        table: &ShardedTable,
        lanes: &mut [Option<Lane>],
        schema: &SchemaRef,
        batch: &RecordBatch,
        metadata: &[u8],
        number: usize,
    ) -> Result<Value, Status> {
        let parsed = BatchMetadata::parse(metadata).map_err(|e| status(e.context(format_args!("table {:?}, DoPut batch {number}", table.name))))?;
        let parts = self.split(table, batch, parsed.writer.is_some())?;
        let mut work = Vec::with_capacity(parts.len());
        for (shard, part) in parts {
            let lane = match lanes[shard].take() {
                Some(lane) => lane,
                None => self.open_lane(catalog, table, shard, schema).await.map_err(|e| self.peer_error(&table.name, Some(shard), table.node_of(shard), &e))?,
            };
            let parsed = parsed.clone();
            let metadata = metadata.to_vec();
            let schema = Arc::clone(schema);
            work.push(async move {
                let (lane, answer) = send_part(lane, &schema, part, &parsed, metadata, number).await;
                (shard, lane, answer)
            });
        }
        let mut answers = Vec::new();
        let mut failure: Option<Status> = None;
        for (shard, lane, answer) in join_all(work).await {
            lanes[shard] = lane;
            match answer {
                Ok(mut answer) => {
                    answer["shard"] = json!(shard);
                    answer["node"] = json!(table.node_of(shard));
                    answers.push(answer);
                }
                Err(e) if failure.is_none() => failure = Some(self.peer_error(&table.name, Some(shard), table.node_of(shard), &e)),
                Err(_) => {}
            }
        }
        if let Some(failure) = failure {
            return Err(Status::new(failure.code(), format!("DoPut batch {number}: {}", failure.message())));
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
        Ok(reply)
    }

    /// The lane of `shard`: its table here, or a DoPut stream to its node.
    async fn open_lane(&self, catalog: &Arc<Catalog>, table: &ShardedTable, shard: usize, schema: &SchemaRef) -> Result<Lane, Status> {
        let node = table.node_of(shard);
        let name = table.shard_table(shard);
        if node == self.me {
            return catalog.get(&name).map(Lane::Local).map_err(status);
        }
        let (sender, receiver) = mpsc::channel::<FlightData>(4);
        let mut first: FlightData = SchemaAsIpc::new(schema, &arrow_ipc::writer::IpcWriteOptions::default()).into();
        first.flight_descriptor = Some(FlightDescriptor::new_path(vec![name]));
        // The daemon reads the first message before it answers the call: queue it first.
        sender.send(first).await.map_err(|_| Status::internal("the forwarding stream closed"))?;
        let mut client = self.peer(node)?;
        let results = client.do_put(self.request(tokio_stream::wrappers::ReceiverStream::new(receiver), None)).await?.into_inner();
        Ok(Lane::Remote { sender, results: Box::new(results) })
    }

    /// Each shard's rows of `batch` (in their order), for the shards it has rows for —
    /// or for every shard when `every_shard` (a writer's batch).
    fn split(&self, table: &ShardedTable, batch: &RecordBatch, every_shard: bool) -> Result<Vec<(usize, RecordBatch)>, Status> {
        let mut rows: Vec<Vec<u32>> = vec![Vec::new(); table.shards];
        if table.shard_key.is_empty() {
            let shard = self.spread.fetch_add(1, Ordering::Relaxed) % table.shards;
            return Ok((0..table.shards)
                .filter(|&s| s == shard || every_shard)
                .map(|s| (s, if s == shard { batch.clone() } else { batch.slice(0, 0) }))
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
            let part = arrow_select::take::take_record_batch(batch, &UInt32Array::from(indices))
                .map_err(|e| Status::internal(format!("splitting a batch by shard: {e}")))?;
            parts.push((shard, part));
        }
        Ok(parts)
    }
}

/// Sends `part` down `lane` and waits for its acknowledgement; the lane back (none once it
/// failed: the next batch would open a new one) and the shard's PutResult metadata.
async fn send_part(lane: Lane, schema: &SchemaRef, part: RecordBatch, metadata: &BatchMetadata, raw: Vec<u8>, number: usize) -> (Option<Lane>, Result<Value, Status>) {
    match lane {
        Lane::Local(entry) => {
            let (metadata, table) = (metadata.clone(), Arc::clone(&entry));
            let answer = crate::service::blocking(move || ops::acknowledge(ops::ingest_batch(&table, &part, &metadata, number)?)).await;
            (Some(Lane::Local(entry)), answer)
        }
        Lane::Remote { sender, mut results } => {
            let answer = async {
                let mut messages = arrow_flight::utils::batches_to_flight_data(schema, [&part])
                    .map_err(|e| Status::internal(format!("encoding a batch to forward: {e}")))?;
                messages.remove(0); // the schema went with the stream's first message
                if let Some(last) = messages.last_mut() {
                    last.app_metadata = raw.into();
                }
                for message in messages {
                    sender.send(message).await.map_err(|_| Status::unavailable("the forwarding stream closed"))?;
                }
                let result = results.message().await?.ok_or_else(|| Status::unavailable("the node ended the stream without acknowledging the batch"))?;
                serde_json::from_slice::<Value>(&result.app_metadata).map_err(|e| Status::internal(format!("the node's PutResult is not JSON: {e}")))
            }
            .await;
            let lane = answer.is_ok().then_some(Lane::Remote { sender, results });
            (lane, answer)
        }
    }
}
