//! What every Flight handler of the daemon shares (the Flight service, Flight SQL and the
//! cluster's reads and writes): the gRPC status of an operation's error, blocking engine
//! work off the async runtime, a scan's rows as a stream, and a plan's `FlightInfo`. It
//! imports none of the handlers' modules.

use std::ops::ControlFlow;
use std::pin::Pin;

use arrow_array::RecordBatch;
use arrow_flight::error::FlightError;
use arrow_flight::{FlightDescriptor, FlightEndpoint, FlightInfo, Ticket};
use shoal_ops::ops::RowScan as TicketRows;
use shoal_ops::{ErrorClass, OpsError};
use tonic::{Code, Status};

use crate::limits::{self, Place, Stop};

/// The gRPC status of an operation's error: the code of the same name as its class, and
/// its message (the one place where the daemon maps [`OpsError`]s).
#[must_use]
pub fn status(error: OpsError) -> Status {
    let code = match error.class {
        ErrorClass::InvalidArgument => Code::InvalidArgument,
        ErrorClass::NotFound => Code::NotFound,
        ErrorClass::AlreadyExists => Code::AlreadyExists,
        ErrorClass::FailedPrecondition => Code::FailedPrecondition,
        ErrorClass::OutOfRange => Code::OutOfRange,
        ErrorClass::ResourceExhausted => Code::ResourceExhausted,
        ErrorClass::Unavailable => Code::Unavailable,
        ErrorClass::Cancelled => Code::Cancelled,
        ErrorClass::Internal => Code::Internal,
    };
    Status::new(code, error.message)
}

pub(crate) type BoxedStream<T> = Pin<Box<dyn futures::Stream<Item = Result<T, Status>> + Send + 'static>>;

/// Runs blocking engine work off the async runtime.
pub(crate) async fn blocking<T: Send + 'static>(work: impl FnOnce() -> Result<T, OpsError> + Send + 'static) -> Result<T, Status> {
    tokio::task::spawn_blocking(work).await.map_err(|e| Status::internal(format!("engine task failed: {e}")))?.map_err(status)
}

/// The `FlightInfo` of a planned query: its result schema, one endpoint per (ticket, plan of
/// its range), the estimated records and the whole plan as `app_metadata`.
pub(crate) fn planned_info(
    schema: &arrow_schema::Schema,
    endpoints: impl Iterator<Item = (Vec<u8>, String)>,
    descriptor: FlightDescriptor,
    total_records: i64,
    metadata: String,
) -> Result<FlightInfo, Status> {
    let endpoints = endpoints.map(|(ticket, plan)| FlightEndpoint::new().with_ticket(Ticket::new(ticket)).with_app_metadata(plan));
    Ok(FlightInfo::new()
        .try_with_schema(schema)
        .map_err(|e| Status::internal(format!("encoding the schema: {e}")))?
        .with_descriptor(descriptor)
        .with_endpoints(endpoints.collect())
        .with_total_records(total_records)
        .with_total_bytes(-1)
        .with_app_metadata(metadata))
}

/// Runs a scan of rows on a blocking thread that holds `place` (a place among the running
/// scans), streaming its batches — through `shaper` when given (Flight SQL's sort, offset,
/// limit and names; it may end the scan early) — until the scan ends, fails (the error is
/// the stream's last item), the receiver goes away, or the receiver takes nothing for the
/// place's idle timeout: then the scan stops, its place goes to the next waiting call, and
/// the stream ends with `DEADLINE_EXCEEDED` after the batches already queued.
pub(crate) fn stream_rows(
    place: Place,
    scan: Box<TicketRows>,
    mut shaper: Option<shoal_ops::sql::Shaper>,
) -> impl futures::Stream<Item = Result<RecordBatch, FlightError>> + Send + 'static {
    let (outlet, batches) = limits::outlet::<Result<RecordBatch, FlightError>>(4, place.idle(), "DoGet", |status| Err(FlightError::Tonic(Box::new(status))));
    tokio::task::spawn_blocking(move || {
        let _place = place;
        let mut failure: Option<OpsError> = None;
        let stop: std::cell::Cell<Option<Stop>> = std::cell::Cell::new(None);
        let send = |batch: Result<RecordBatch, FlightError>| match outlet.blocking_send(batch) {
            Ok(()) => ControlFlow::Continue(()),
            Err(why) => {
                stop.set(Some(why));
                ControlFlow::Break(())
            }
        };
        let result = scan.run(&mut |batch| {
            let batch = match shaper.as_mut() {
                None => Some(batch),
                Some(shaper) => match shaper.push(batch) {
                    Ok(shaped) => shaped,
                    Err(error) => {
                        failure = Some(error);
                        return ControlFlow::Break(());
                    }
                },
            };
            if let Some(batch) = batch {
                send(Ok(batch))?;
            }
            if shaper.as_ref().is_some_and(shoal_ops::sql::Shaper::is_done) { ControlFlow::Break(()) } else { ControlFlow::Continue(()) }
        });
        let result = match (result, failure) {
            (Err(error), _) | (Ok(()), Some(error)) => Err(error),
            (Ok(()), None) if stop.get().is_some() => Ok(None),
            (Ok(()), None) => shaper.as_mut().map_or(Ok(None), shoal_ops::sql::Shaper::finish),
        };
        if stop.get().is_none() {
            let _ = match result {
                Ok(Some(last)) => send(Ok(last)),
                Ok(None) => ControlFlow::Continue(()),
                Err(error) => send(Err(FlightError::Tonic(Box::new(status(error))))),
            };
        }
        if stop.get() == Some(Stop::Stalled) {
            outlet.stall();
        } else {
            outlet.finish();
        }
    });
    batches
}
