//! The put pipeline: every way records come in — DoPut on a table, Flight SQL's bulk
//! ingest, a node's lane into a shard it holds (`cluster::writes`) — ingests its batches
//! here. Three stages overlap, so that receiving and decoding batch n+1 and waiting for
//! batch n-1 to become durable go on while batch n is ingested: the caller's task decodes
//! its messages into [`PutBatch`]es; a blocking worker ingests them in order (a writer's
//! serials must reach the table in order); a second stage waits for each batch's
//! durability (per its table's policy, `ops::acknowledge_while`) and answers it. A failure
//! of any stage travels through the same ordered queues: the answers of every batch before
//! it, then the error, then nothing.

use std::sync::{Arc, Weak};

use arrow_array::RecordBatch;
use serde_json::Value;
use shoal_ops::catalog::TableEntry;
use shoal_ops::ops;
use shoal_ops::protocol::BatchMetadata;
use tokio::sync::mpsc;
use tonic::Status;

use crate::limits::{Caller, CallerAdmission, Place};
use crate::rpc::blocking;

/// Batches of one stream that may wait between two stages, and answers that may wait to be
/// sent: enough to keep every stage busy, small enough to bound what a stream holds
/// (batches are typically a few MB).
pub(crate) const PIPELINE_DEPTH: usize = 4;

/// Batches of one stream written into their table and waiting for their durability (their
/// records are in the log, not in the stream's memory): enough that a stream keeps the log
/// busy while acknowledgements take a round trip to a remote store (durability `remote`:
/// with 4, ingestion was bound by that latency, 0.25× of `group_commit`).
pub(crate) const ACKNOWLEDGE_DEPTH: usize = 32;

/// One batch on its way into its table.
pub(crate) struct PutBatch {
    /// The table it goes into.
    pub entry: Arc<TableEntry>,
    /// Its records (a `json` column; an optional `op` column).
    pub batch: RecordBatch,
    /// Its `app_metadata`: a writer's serial, a transaction.
    pub metadata: BatchMetadata,
    /// Its position in its stream, for messages ("DoPut batch 3").
    pub number: usize,
    /// The stream's place among the ingesting streams while this batch is in flight,
    /// given back once its answer is made ([`Places`]); `None` when the caller holds one
    /// for the whole stream.
    pub place: Option<Arc<Place>>,
}

/// A stream's place among the ingesting streams, held while a batch of it is in flight
/// (from its arrival until its answer is made), not while the client is silent: a stream
/// left open without sending costs no place.
pub(crate) struct Places {
    admission: CallerAdmission,
    held: Weak<Place>,
}

impl Places {
    /// The places of `caller`'s stream, taken from `admission`.
    pub(crate) fn new(admission: &Arc<crate::limits::Admission>, caller: Caller) -> Self {
        Self { admission: admission.for_caller(caller), held: Weak::new() }
    }

    /// The place for the stream's next batch: the one its batches in flight hold, else a
    /// new one (waiting for it as [`crate::limits::Admission::enter`] does).
    ///
    /// # Errors
    /// `RESOURCE_EXHAUSTED` when no place frees up in time.
    pub(crate) async fn for_batch(&mut self) -> Result<Arc<Place>, Status> {
        if let Some(held) = self.held.upgrade() {
            return Ok(held);
        }
        let place = Arc::new(self.admission.enter().await?);
        self.held = Arc::downgrade(&place);
        Ok(place)
    }
}

/// Ingests the `batches` in order and acknowledges each under its table's durability
/// policy, giving up a durability wait (`CANCELLED`) once `gone` says the client left.
/// Returns each batch's answer (its PutResult metadata, JSON) in order; after an error
/// (an item of `batches`, an ingestion or a durability failure) nothing more.
pub(crate) fn ingest_in_order(
    mut batches: mpsc::Receiver<Result<PutBatch, Status>>,
    gone: impl Fn() -> bool + Send + Sync + 'static,
) -> mpsc::Receiver<Result<Value, Status>> {
    let (ingested_sender, mut ingested) = mpsc::channel::<Result<(ops::Ingested, Option<Arc<Place>>), Status>>(ACKNOWLEDGE_DEPTH);
    let (answer_sender, answers) = mpsc::channel::<Result<Value, Status>>(PIPELINE_DEPTH);
    tokio::spawn(async move {
        while let Some(item) = batches.recv().await {
            let result = match item {
                Ok(PutBatch { entry, batch, metadata, number, place }) => {
                    blocking(move || ops::ingest_batch(&entry, &batch, &metadata, number)).await.map(|done| (done, place))
                }
                Err(status) => Err(status),
            };
            let failed = result.is_err();
            if ingested_sender.send(result).await.is_err() || failed {
                return;
            }
        }
    });
    let gone = Arc::new(gone);
    tokio::spawn(async move {
        while let Some(item) = ingested.recv().await {
            let result = match item {
                Ok((done, place)) => {
                    let gone = Arc::clone(&gone);
                    blocking(move || {
                        let _place = place;
                        ops::acknowledge_while(done, &|| !gone())
                    })
                    .await
                }
                Err(status) => Err(status),
            };
            let failed = result.is_err();
            if answer_sender.send(result).await.is_err() || failed {
                return;
            }
        }
    });
    answers
}
