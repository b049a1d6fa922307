//! The operations' error: a protocol error class and a message (`docs/protocol.md`,
//! "Errors"). The Flight service maps the class onto the gRPC status code of the same
//! name (in one place, `status` in `flight-server/src/rpc.rs`); the embedded mode
//! hands the class's name to the JVM.

use std::fmt;

/// The class of an [`OpsError`]: what a client can do about it. The names are gRPC's
/// status codes, which is what Flight clients see.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorClass {
    /// The request is wrong (a malformed body, an unknown column, a bad value): do not retry.
    InvalidArgument,
    /// A table, PSF, transaction or writer that does not exist.
    NotFound,
    /// A table or PSF that exists already.
    AlreadyExists,
    /// The request does not fit the current state (a transaction already committed, a
    /// durable table on an in-memory daemon).
    FailedPrecondition,
    /// An address outside what the log holds (truncated, or beyond the tail).
    OutOfRange,
    /// A limit was reached (memory, disk, concurrent calls): retry later or raise it.
    ResourceExhausted,
    /// The engine is closing.
    Unavailable,
    /// The caller went away (or gave up) while the operation waited.
    Cancelled,
    /// A fault of shoal's own (a bug or an I/O failure).
    Internal,
}

impl ErrorClass {
    /// The class's canonical name, as in gRPC (`INVALID_ARGUMENT`, ...).
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InvalidArgument => "INVALID_ARGUMENT",
            Self::NotFound => "NOT_FOUND",
            Self::AlreadyExists => "ALREADY_EXISTS",
            Self::FailedPrecondition => "FAILED_PRECONDITION",
            Self::OutOfRange => "OUT_OF_RANGE",
            Self::ResourceExhausted => "RESOURCE_EXHAUSTED",
            Self::Unavailable => "UNAVAILABLE",
            Self::Cancelled => "CANCELLED",
            Self::Internal => "INTERNAL",
        }
    }
}

/// Why an operation failed: its class and a message naming what was wrong (the table,
/// key, row or address concerned), bounded to [`MAX_STATUS_MESSAGE_BYTES`]
/// where it quotes client input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpsError {
    /// What a client can do about it.
    pub class: ErrorClass,
    /// What was wrong.
    pub message: String,
}

/// The result of an operation.
pub type OpsResult<T> = Result<T, OpsError>;

macro_rules! constructors {
    ($($name:ident => $class:ident),* $(,)?) => {
        $(
            #[doc = concat!("An error of class [`ErrorClass::", stringify!($class), "`].")]
            pub fn $name(message: impl Into<String>) -> Self {
                Self::new(ErrorClass::$class, message)
            }
        )*
    };
}

impl OpsError {
    /// An error of `class`.
    pub fn new(class: ErrorClass, message: impl Into<String>) -> Self {
        Self { class, message: message.into() }
    }

    constructors! {
        invalid_argument => InvalidArgument,
        not_found => NotFound,
        already_exists => AlreadyExists,
        failed_precondition => FailedPrecondition,
        out_of_range => OutOfRange,
        resource_exhausted => ResourceExhausted,
        unavailable => Unavailable,
        cancelled => Cancelled,
        internal => Internal,
    }

    /// The same error with `context` put before its message (`"{context}: {message}"`).
    #[must_use]
    pub fn context(self, context: impl fmt::Display) -> Self {
        Self { class: self.class, message: format!("{context}: {}", self.message) }
    }

    /// An engine error with its class (an invalid expression is `INVALID_ARGUMENT`, a
    /// full disk `RESOURCE_EXHAUSTED`, a closed table `UNAVAILABLE`, ...).
    #[must_use]
    pub fn from_engine(error: &shoal_core::Error) -> Self {
        use shoal_core::Error as E;
        let message = bounded(error.to_string());
        let class = match error {
            E::InvalidPath { .. }
            | E::InvalidExpression { .. }
            | E::InvalidRecord { .. }
            | E::InvalidKey { .. }
            | E::InvalidOperation(_)
            | E::RecordTooLarge { .. }
            | E::InvalidPsf { .. }
            | E::UnknownColumn { .. }
            | E::ColumnNotInferred { .. }
            | E::InvalidAggregate { .. }
            | E::InvalidPlan(_)
            | E::InvalidConfig(_) => ErrorClass::InvalidArgument,
            E::PsfNotFound(_) => ErrorClass::NotFound,
            E::PsfExists(_) => ErrorClass::AlreadyExists,
            E::AddressNotReadable { .. } | E::AggregateOverflow { .. } | E::SnapshotTooOld { .. } => ErrorClass::OutOfRange,
            // ENOSPC, EDQUOT: the disk (or the quota) is full.
            E::Io { source, .. } if matches!(source.raw_os_error(), Some(28 | 122)) => ErrorClass::ResourceExhausted,
            E::MemoryFull { .. } => ErrorClass::ResourceExhausted,
            E::Closed | E::RemoteUnavailable(_) | E::Moving(_) => ErrorClass::Unavailable,
            E::Cancelled(_) => ErrorClass::Cancelled,
            E::Fenced(_) => ErrorClass::FailedPrecondition,
            _ => ErrorClass::Internal,
        };
        Self::new(class, message)
    }
}

impl From<shoal_core::Error> for OpsError {
    fn from(error: shoal_core::Error) -> Self {
        Self::from_engine(&error)
    }
}

impl fmt::Display for OpsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.class.as_str(), self.message)
    }
}

impl std::error::Error for OpsError {}

/// The most bytes of a status message: gRPC refuses metadata past about 16 KiB, which
/// would turn an `INVALID_ARGUMENT` that echoes a huge input into a `RESOURCE_EXHAUSTED`
/// that says nothing.
pub const MAX_STATUS_MESSAGE_BYTES: usize = 4096;

/// `message` cut to [`MAX_STATUS_MESSAGE_BYTES`] (at a character boundary), saying how
/// long it was.
#[must_use]
pub fn bounded(message: String) -> String {
    if message.len() <= MAX_STATUS_MESSAGE_BYTES {
        return message;
    }
    let mut end = MAX_STATUS_MESSAGE_BYTES - 64;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… (message cut; {} bytes in all)", &message[..end], message.len())
}
