//! Validation of a keyed table's candidates ([`crate::keys`]): each record a scan would
//! return is checked to be its key's latest version below the scan's snapshot.

use super::reader::LogReader;
use crate::error::Result;
use crate::keys::{Keyed, Latest, Verdict};
use crate::record::{KeyPointer, RecordView, KEY_POINTER_SIZE};
use crate::table::Table;
use crate::LogAddress;

/// A scan's validator: the table's key state and the snapshot address.
pub(super) struct Validator<'t> {
    table: &'t Table,
    keyed: &'t Keyed,
    snapshot: LogAddress,
    key: Vec<u8>,
    reader: LogReader<'t>,
    /// Chain walks done for keys whose latest version lies past the snapshot.
    pub(super) walks: u64,
}

impl<'t> Validator<'t> {
    /// A validator for `table` (keyed) at `snapshot`.
    pub(super) fn new(table: &'t Table, keyed: &'t Keyed, snapshot: LogAddress) -> Self {
        Self { table, keyed, snapshot, key: Vec::new(), reader: LogReader::new(table.log()), walks: 0 }
    }

    /// The verdict on the version at `address` from its address alone: scans drop
    /// [`Verdict::Superseded`] candidates before reading or parsing them.
    pub(super) fn by_address(&self, address: LogAddress) -> Verdict {
        match self.keyed.index.validate(address, self.snapshot) {
            // A version below the begin address that a scan read before a log compaction
            // dropped the head: its entry may be gone already, and a live one was copied
            // above (read after the lookup, the begin address is at least the one the
            // compaction set before it pruned the entry).
            Verdict::Live if address < self.table.log().begin_address() => Verdict::Superseded,
            verdict => verdict,
        }
    }

    /// For a candidate whose newer version lies at or above the snapshot
    /// ([`Verdict::Walk`]): whether the record at `address` is the version of its key the
    /// snapshot sees, from a walk of the key's chain. The key comes from the record's key
    /// pointer (read again: walks are rare, and scans need not parse the key's fields
    /// for them); a record without one is not (it cannot be in a keyed table).
    ///
    /// # Errors
    /// Device errors of the record read and the chain walk.
    pub(super) fn walk(&mut self, address: LogAddress) -> Result<bool> {
        let Some(record) = self.reader.read_record(address)? else { return Ok(false) };
        let view = RecordView::new(record).ok_or_else(|| super::corrupt(address, "record"))?;
        if !self.keyed.record_key(&view, &mut self.key) {
            return Ok(false);
        }
        self.walks += 1;
        let found = self.table.key_versions(self.keyed, &self.key, self.snapshot, 1, &mut self.reader)?;
        Ok(found.first() == Some(&Latest { address, tombstone: false }))
    }
}

impl Table {
    /// Up to `limit` versions of `key` below `snapshot`, newest first, from the key's chain
    /// (records of other keys that share it are passed over): the first is the version a
    /// snapshot at `snapshot` sees; none when the key had no version below it (or
    /// retention dropped them).
    ///
    /// # Errors
    /// Device errors.
    pub(super) fn key_versions(
        &self,
        keyed: &Keyed,
        key: &[u8],
        snapshot: LogAddress,
        limit: usize,
        reader: &mut LogReader<'_>,
    ) -> Result<Vec<Latest>> {
        let mut versions = Vec::new();
        let psf = keyed.key.psf;
        let mut address = LogAddress::new(self.index().find_entry(crate::ingest::property_hash(psf, key)).unwrap_or(0));
        let mut canonical = Vec::new();
        while address != LogAddress::ZERO && address >= self.log().begin_address() {
            let Some(bytes) = reader.read(address, KEY_POINTER_SIZE)? else { return Ok(versions) };
            let kp = KeyPointer::decode(super::words(bytes));
            let record_address = KeyPointer::record_of(address, usize::from(kp.index));
            if kp.psf_id == psf && record_address < snapshot {
                if let Some(record) = reader.read_record(record_address)? {
                    let view = RecordView::new(record).ok_or_else(|| super::corrupt(record_address, "key chain record"))?;
                    let header = view.header();
                    canonical.clear();
                    if header.is_visible()
                        && !header.is_invalid()
                        && kp.canonical_value(view.value_region(), view.payload(), &mut canonical)
                        && canonical == key
                    {
                        versions.push(Latest { address: record_address, tombstone: view.payload().is_empty() });
                        if versions.len() >= limit {
                            return Ok(versions);
                        }
                    }
                }
            }
            if kp.previous >= address.get() {
                return Err(super::corrupt(address, "key chain goes forward"));
            }
            address = LogAddress::new(kp.previous);
        }
        Ok(versions)
    }

    /// The payload of the record at `address` (copied; empty for a tombstone), or `None`
    /// when it is no longer readable.
    ///
    /// # Errors
    /// Device errors.
    pub(crate) fn read_payload(&self, address: LogAddress) -> Result<Option<Vec<u8>>> {
        let mut reader = LogReader::new(self.log());
        let Some(record) = reader.read_record(address)? else { return Ok(None) };
        let view = RecordView::new(record).ok_or_else(|| super::corrupt(address, "record"))?;
        Ok(Some(view.payload().to_vec()))
    }

    /// Re-reads, from their chains, the versions of each key one of whose versions was
    /// withdrawn ([`Table::withdraw`]), so that the key index and the superseded-versions
    /// table no longer name a record that is not there.
    ///
    /// # Errors
    /// Device errors.
    pub(crate) fn revalidate_withdrawn(&self, keyed: &Keyed, keys: &[Vec<u8>]) -> Result<()> {
        let mut reader = LogReader::new(self.log());
        for key in keys {
            let versions = self.key_versions(keyed, key, LogAddress::MAX, usize::MAX, &mut reader)?;
            keyed.index.reset(key, &versions);
        }
        Ok(())
    }
}

/// What [`Table::delete_where`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct DeleteReport {
    /// Keys deleted (tombstones written): the live rows that matched.
    pub deleted: u64,
    /// One past the last byte written (0 if nothing was): durable once the table's
    /// durable address reaches it.
    pub end_address: LogAddress,
}

impl Table {
    /// Deletes every live row of a keyed table that matches `filter` (all rows when
    /// `None`): the rows the query sees at this moment (its snapshot) get a tombstone
    /// each, written in batches as the scan finds them — SQL's `DELETE FROM t WHERE …`
    /// (Spark's `SupportsDelete`). Keys first written after the call began are not
    /// deleted; a key that matched and is upserted again while the delete runs may be
    /// deleted after that upsert (last writer wins: there are no transactions across
    /// keys).
    ///
    /// # Errors
    /// [`crate::Error::InvalidOperation`] on an append-only table; scan and ingest errors
    /// (tombstones written before the error stay: each batch of them is atomic, the whole
    /// delete is not).
    pub fn delete_where(&self, filter: Option<&crate::psf::Expr>) -> Result<DeleteReport> {
        if self.keyed().is_none() {
            return Err(crate::Error::InvalidOperation(
                "DELETE needs a keyed table (one created with a primary key); this table is append-only".into(),
            ));
        }
        let request = super::ScanRequest { filter: filter.cloned(), ..super::ScanRequest::default() };
        let mut report = DeleteReport::default();
        let ops = vec![crate::keys::RecordOp::Delete; request.batch_rows];
        // Tombstones land past the plan's snapshot, so the scan never sees them. The sink
        // runs with no epoch protection held (scans hand batches over after dropping it).
        self.replanned(&request, |plan| self.scan_json(&request, plan, &mut |batch| {
            let column = batch
                .column(0)
                .as_any()
                .downcast_ref::<arrow_array::StringArray>()
                .ok_or_else(|| crate::Error::InvalidOperation("a JSON scan gave no Utf8 column".into()))?;
            // The JSON output column is non-null.
            let records: Vec<&[u8]> = column.iter().map(|text| text.unwrap_or_default().as_bytes()).collect();
            let written = self.ingest_ops(&records, &ops[..records.len()])?;
            report.deleted += written.records as u64;
            report.end_address = report.end_address.max(written.end_address);
            Ok(std::ops::ControlFlow::Continue(()))
        }))?;
        Ok(report)
    }
}
