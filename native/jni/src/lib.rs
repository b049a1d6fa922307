//! shoal's embedded mode: the engine inside a JVM, through JNI (`docs/embedded.md`).
//!
//! The natives of `dev.shoal.embedded.ShoalNative` are implemented here over the daemon's
//! own operations ([`shoal_ops::ops`]), so the embedded engine answers the same
//! actions with the same JSON, plans queries the same way and fails with the same error
//! classes as the Flight service (`docs/protocol.md`). Data crosses the boundary through
//! the Arrow C Data Interface without copies: batches to ingest come in as an
//! `ArrowArray` + `ArrowSchema`, scans go out as an `ArrowArrayStream` fed by a native
//! thread.
//!
//! Safety across the boundary: handles are numbers looked up in a registry
//! ([`engines`]), so a closed or forged handle is an exception, not a crash; every call
//! catches panics and turns them, like every error, into a
//! `dev.shoal.embedded.ShoalEmbeddedException(operation, code, message)`.

pub mod engines;
pub mod operations;

use std::panic::{catch_unwind, AssertUnwindSafe};

use jni::errors::ThrowRuntimeExAndDefault;
use jni::objects::{JByteArray, JClass, JString, JThrowable, JValue};
use jni::sys::jlong;
use jni::{jni_sig, jni_str, Env, EnvUnowned};

use crate::engines::Failure;

/// Runs `work` for the native `operation`: its errors and panics become a
/// `ShoalEmbeddedException` thrown into the JVM, and the native returns `T::default()`.
fn run<'local, T: Default>(
    unowned: &mut EnvUnowned<'local>,
    operation: impl FnOnce() -> String,
    work: impl FnOnce(&mut Env<'local>) -> Result<T, Failure>,
) -> T {
    unowned
        .with_env(|env| -> Result<T, jni::errors::Error> {
            let failure = match catch_unwind(AssertUnwindSafe(|| work(env))) {
                Ok(Ok(value)) => return Ok(value),
                Ok(Err(failure)) => failure,
                Err(panic) => Failure::new("PANIC", format!("the native engine panicked: {}", panic_text(panic.as_ref()))),
            };
            // A Java exception already pending (e.g. from a failed JNI call) travels as it is.
            if !env.exception_check() {
                throw(env, &operation(), &failure)?;
            }
            Ok(T::default())
        })
        .resolve::<ThrowRuntimeExAndDefault>()
}

/// The message of a caught panic (its `&str` or `String` payload).
pub(crate) fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(ToString::to_string)
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_owned())
}

fn throw(env: &mut Env<'_>, operation: &str, failure: &Failure) -> Result<(), jni::errors::Error> {
    let operation = env.new_string(operation)?;
    let code = env.new_string(failure.code)?;
    let message = env.new_string(&failure.message)?;
    let exception = env.new_object(
        jni_str!("dev/shoal/embedded/ShoalEmbeddedException"),
        jni_sig!("(Ljava/lang/String;Ljava/lang/String;Ljava/lang/String;)V"),
        &[
            JValue::from(&operation),
            JValue::from(&code),
            JValue::from(&message),
        ],
    )?;
    let exception = env.cast_local::<JThrowable>(exception)?;
    env.throw(exception)
}

fn jni_failure(what: &str) -> impl Fn(jni::errors::Error) -> Failure + '_ {
    move |e| Failure::new("INVALID_ARGUMENT", format!("{what}: {e}"))
}

/// A Java string argument that must not be null.
fn string(env: &Env<'_>, value: &JString<'_>, what: &str) -> Result<String, Failure> {
    if value.is_null() {
        return Err(Failure::new(
            "INVALID_ARGUMENT",
            format!("{what} must not be null"),
        ));
    }
    value.try_to_string(env).map_err(jni_failure(what))
}

/// A Java string argument that may be null.
fn optional_string(
    env: &Env<'_>,
    value: &JString<'_>,
    what: &str,
) -> Result<Option<String>, Failure> {
    if value.is_null() {
        return Ok(None);
    }
    value
        .try_to_string(env)
        .map(Some)
        .map_err(jni_failure(what))
}

fn address<T>(value: jlong, what: &str) -> Result<*mut T, Failure> {
    if value == 0 {
        return Err(Failure::new(
            "INVALID_ARGUMENT",
            format!("{what} is a null address"),
        ));
    }
    #[allow(clippy::cast_sign_loss)]
    Ok(value as usize as *mut T)
}

#[allow(clippy::cast_sign_loss)]
fn handle(value: jlong) -> u64 {
    value as u64
}

fn new_string<'local>(env: &mut Env<'local>, value: &str) -> Result<JString<'local>, Failure> {
    env.new_string(value)
        .map_err(|e| Failure::new("INTERNAL", format!("cannot create a Java string: {e}")))
}

/// `static native long open(String dataDir, String optionsJson)`.
#[unsafe(no_mangle)]
pub extern "system" fn Java_dev_shoal_embedded_ShoalNative_open<'local>(
    mut unowned: EnvUnowned<'local>,
    _class: JClass<'local>,
    data_dir: JString<'local>,
    options: JString<'local>,
) -> jlong {
    run(
        &mut unowned,
        || "open".to_owned(),
        |env| {
            let dir = string(env, &data_dir, "dataDir")?;
            let options = optional_string(env, &options, "optionsJson")?;
            let handle = engines::open(std::path::Path::new(&dir), options.as_deref())?;
            jlong::try_from(handle).map_err(|_| Failure::new("INTERNAL", "handle overflow"))
        },
    )
}

/// `static native void close(long handle)`: idempotent.
#[unsafe(no_mangle)]
pub extern "system" fn Java_dev_shoal_embedded_ShoalNative_close<'local>(
    mut unowned: EnvUnowned<'local>,
    _class: JClass<'local>,
    handle_value: jlong,
) {
    run(
        &mut unowned,
        || "close".to_owned(),
        |_| {
            engines::close(handle(handle_value));
            Ok(())
        },
    );
}

/// `static native String action(long handle, String type, String bodyJson)`.
#[unsafe(no_mangle)]
pub extern "system" fn Java_dev_shoal_embedded_ShoalNative_action<'local>(
    mut unowned: EnvUnowned<'local>,
    _class: JClass<'local>,
    handle_value: jlong,
    action: JString<'local>,
    body: JString<'local>,
) -> JString<'local> {
    let label = std::cell::RefCell::new(String::new());
    run(
        &mut unowned,
        || format!("action {}", label.borrow()),
        |env| {
            let name = string(env, &action, "type")?;
            label.replace(name.clone());
            let body = optional_string(env, &body, "bodyJson")?.unwrap_or_else(|| "{}".to_owned());
            let result = operations::action(handle(handle_value), &name, &body)?;
            new_string(env, &result)
        },
    )
}

/// `static native String listTables(long handle)`.
#[unsafe(no_mangle)]
pub extern "system" fn Java_dev_shoal_embedded_ShoalNative_listTables<'local>(
    mut unowned: EnvUnowned<'local>,
    _class: JClass<'local>,
    handle_value: jlong,
) -> JString<'local> {
    run(
        &mut unowned,
        || "listTables".to_owned(),
        |env| {
            let result = operations::list_tables(handle(handle_value))?;
            new_string(env, &result)
        },
    )
}

/// `static native void getSchema(long handle, String table, long arrowSchemaAddress)`.
#[unsafe(no_mangle)]
pub extern "system" fn Java_dev_shoal_embedded_ShoalNative_getSchema<'local>(
    mut unowned: EnvUnowned<'local>,
    _class: JClass<'local>,
    handle_value: jlong,
    table: JString<'local>,
    schema_address: jlong,
) {
    run(
        &mut unowned,
        || "getSchema".to_owned(),
        |env| {
            let table = string(env, &table, "table")?;
            let out = address(schema_address, "arrowSchemaAddress")?;
            // SAFETY: the caller passes the address of an ArrowSchema struct it allocated
            // (ArrowSchema.allocateNew), empty (released) as the C Data Interface requires.
            unsafe { operations::get_schema(handle(handle_value), &table, out) }
        },
    );
}

/// `static native String getFlightInfo(long handle, String commandJson, long arrowSchemaAddress)`.
#[unsafe(no_mangle)]
pub extern "system" fn Java_dev_shoal_embedded_ShoalNative_getFlightInfo<'local>(
    mut unowned: EnvUnowned<'local>,
    _class: JClass<'local>,
    handle_value: jlong,
    command: JString<'local>,
    schema_address: jlong,
) -> JString<'local> {
    run(
        &mut unowned,
        || "getFlightInfo".to_owned(),
        |env| {
            let command = string(env, &command, "commandJson")?;
            let out = address(schema_address, "arrowSchemaAddress")?;
            // SAFETY: as in getSchema.
            let result =
                unsafe { operations::get_flight_info(handle(handle_value), &command, out)? };
            new_string(env, &result)
        },
    )
}

/// `static native void doGet(long handle, byte[] ticket, long arrowArrayStreamAddress)`.
#[unsafe(no_mangle)]
pub extern "system" fn Java_dev_shoal_embedded_ShoalNative_doGet<'local>(
    mut unowned: EnvUnowned<'local>,
    _class: JClass<'local>,
    handle_value: jlong,
    ticket: JByteArray<'local>,
    stream_address: jlong,
) {
    run(
        &mut unowned,
        || "doGet".to_owned(),
        |env| {
            if ticket.is_null() {
                return Err(Failure::new("INVALID_ARGUMENT", "ticket must not be null"));
            }
            let ticket = env
                .convert_byte_array(&ticket)
                .map_err(jni_failure("ticket"))?;
            let out = address(stream_address, "arrowArrayStreamAddress")?;
            // SAFETY: the caller passes the address of an ArrowArrayStream struct it allocated
            // (ArrowArrayStream.allocateNew), empty.
            unsafe { operations::do_get(handle(handle_value), &ticket, out) }
        },
    );
}

/// `static native String doPut(long handle, String table, long arrowArrayAddress, long arrowSchemaAddress, String appMetadataJson)`.
#[unsafe(no_mangle)]
pub extern "system" fn Java_dev_shoal_embedded_ShoalNative_doPut<'local>(
    mut unowned: EnvUnowned<'local>,
    _class: JClass<'local>,
    handle_value: jlong,
    table: JString<'local>,
    array_address: jlong,
    schema_address: jlong,
    metadata: JString<'local>,
) -> JString<'local> {
    run(
        &mut unowned,
        || "doPut".to_owned(),
        |env| {
            let array = address(array_address, "arrowArrayAddress")?;
            let schema = address(schema_address, "arrowSchemaAddress")?;
            // SAFETY: the caller exported a batch into the ArrowArray and ArrowSchema at these
            // addresses (Data.exportVectorSchemaRoot); importing moves them (the structs are
            // left released), so the batch is taken over even if a later check fails.
            let batch = unsafe { operations::import_batch(array, schema)? };
            let table = string(env, &table, "table")?;
            let metadata = optional_string(env, &metadata, "appMetadataJson")?;
            let result =
                operations::do_put(handle(handle_value), &table, &batch, metadata.as_deref())?;
            new_string(env, &result)
        },
    )
}

/// `static native void selfTestPanic(String message)`: panics with `message`, so that tests
/// can check a panic comes back as a `PANIC` exception (it touches no engine).
#[unsafe(no_mangle)]
pub extern "system" fn Java_dev_shoal_embedded_ShoalNative_selfTestPanic<'local>(
    mut unowned: EnvUnowned<'local>,
    _class: JClass<'local>,
    message: JString<'local>,
) {
    run(&mut unowned, || "selfTestPanic".to_owned(), |env| -> Result<(), Failure> {
        let message = string(env, &message, "message")?;
        panic!("{message}");
    });
}
