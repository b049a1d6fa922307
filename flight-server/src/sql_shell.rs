//! `shoal sql`: SQL over the daemon's Flight SQL service, as `psql` or `clickhouse-client`
//! do it: `-c STATEMENT` runs one statement; otherwise an interactive shell (line editing and
//! history in `~/.shoal_history` through rustyline; statements end with `;` and may span
//! lines) or, when standard input is not a terminal, the statements it holds, one after
//! the other. Every statement goes as Flight SQL's `CommandStatementQuery` (a `DELETE` then
//! runs as the update it is and answers `rows_affected`: docs/sql.md).
//!
//! Backslash commands, on a line of their own (also in `-c` and on standard input): `\dt`
//! (tables), `\d TABLE` (its columns and types), `\timing` (each statement's time), `\format
//! table|json|jsonl|csv`, `\?` (help), `\q` (quit).

use std::io::{IsTerminal, Write as _};
use std::sync::Arc;
use std::time::Instant;

use arrow_array::{Array, BinaryArray, RecordBatch, StringArray};
use arrow_flight::sql::client::FlightSqlServiceClient;
use arrow_flight::sql::CommandGetTables;
use futures::TryStreamExt;
use tonic::transport::Channel;

use crate::client::{connect_channel, sql_error, write_rows, Connection, OutputFormat};

/// `shoal sql`.
#[derive(clap::Args)]
pub struct SqlArgs {
    #[command(flatten)]
    connection: Connection,
    /// Run this statement (or `;`-separated statements) and exit.
    #[arg(short = 'c', long = "command")]
    command: Option<String>,
    /// How rows are printed: a table, or rows only as JSON, JSON lines or CSV.
    #[arg(long, value_enum, default_value_t = OutputFormat::Table)]
    format: OutputFormat,
    /// Print each statement's time.
    #[arg(long)]
    timing: bool,
}

/// The shell's state: the client and the settings backslash commands change.
struct Shell {
    client: FlightSqlServiceClient<Channel>,
    format: OutputFormat,
    timing: bool,
}

const HELP: &str = "\
statements end with ;  (SELECT …, EXPLAIN SELECT …, DELETE FROM … on a keyed table)
\\dt                 list the tables
\\d TABLE            the columns of TABLE and their types
\\timing             print each statement's time (on/off)
\\format FORMAT      table, json, jsonl or csv
\\q                  quit";

/// Runs `shoal sql`.
///
/// # Errors
/// A connection that fails; with `-c` or statements on standard input, the first statement
/// that fails (the shell itself prints a failed statement's error and goes on).
pub async fn sql(args: SqlArgs) -> Result<(), String> {
    if args.format == OutputFormat::Arrow {
        return Err("--format arrow is for `shoal query -o FILE`; `shoal sql` prints table, json, jsonl or csv".into());
    }
    let (channel, headers) = connect_channel(&args.connection).await?;
    let mut client = FlightSqlServiceClient::new(channel);
    for (key, value) in headers {
        client.set_header(key, value);
    }
    let mut shell = Shell { client, format: args.format, timing: args.timing };
    if let Some(command) = args.command {
        return shell.script(&command).await;
    }
    if !std::io::stdin().is_terminal() {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut text).map_err(|e| format!("standard input: {e}"))?;
        return shell.script(&text).await;
    }
    interactive(&mut shell, &args.connection).await
}

/// The interactive loop: a prompt, line editing and history, statements until `;`.
async fn interactive(shell: &mut Shell, connection: &Connection) -> Result<(), String> {
    let mut editor = rustyline::DefaultEditor::new().map_err(|e| format!("terminal: {e}"))?;
    let history = std::env::var_os("HOME").map(|home| std::path::Path::new(&home).join(".shoal_history"));
    if let Some(path) = &history {
        let _ = editor.load_history(path);
    }
    println!("shoal sql on {}: statements end with ;  \\? for help, \\q to quit", connection.endpoint());
    let mut pending = String::new();
    loop {
        let prompt = if pending.is_empty() { "shoal> " } else { "   ... " };
        let line = match editor.readline(prompt) {
            Ok(line) => line,
            Err(rustyline::error::ReadlineError::Interrupted) => {
                pending.clear();
                continue;
            }
            Err(rustyline::error::ReadlineError::Eof) => break,
            Err(e) => return Err(format!("terminal: {e}")),
        };
        let trimmed = line.trim();
        if pending.is_empty() && trimmed.starts_with('\\') {
            let _ = editor.add_history_entry(trimmed);
            if trimmed == "\\q" {
                break;
            }
            if let Err(e) = shell.backslash(trimmed).await {
                eprintln!("error: {e}");
            }
            continue;
        }
        pending.push_str(&line);
        pending.push('\n');
        if !ends_statement(&pending) {
            continue;
        }
        let text = std::mem::take(&mut pending);
        let _ = editor.add_history_entry(text.trim());
        for statement in split_statements(&text) {
            if let Err(e) = shell.run(&statement).await {
                eprintln!("error: {e}");
            }
        }
    }
    if let Some(path) = &history {
        let _ = editor.save_history(path);
    }
    Ok(())
}

impl Shell {
    /// Runs the statements and backslash commands (each on a line of its own) of `text` in
    /// order, stopping at the first that fails.
    async fn script(&mut self, text: &str) -> Result<(), String> {
        let mut pending = String::new();
        for line in text.lines() {
            if pending.trim().is_empty() && line.trim_start().starts_with('\\') {
                if line.trim() == "\\q" {
                    return Ok(());
                }
                self.backslash(line.trim()).await?;
                continue;
            }
            pending.push_str(line);
            pending.push('\n');
            if ends_statement(&pending) {
                for statement in split_statements(&std::mem::take(&mut pending)) {
                    self.run(&statement).await?;
                }
            }
        }
        for statement in split_statements(&pending) {
            self.run(&statement).await?;
        }
        Ok(())
    }

    /// Runs one statement and prints its rows (and, as set, its time).
    async fn run(&mut self, statement: &str) -> Result<(), String> {
        let started = Instant::now();
        let info = self.client.execute(statement.to_owned(), None).await.map_err(|e| sql_error(statement, &e))?;
        let mut batches = Vec::new();
        let mut schema = info.clone().try_decode_schema().ok().map(Arc::new);
        for endpoint in info.endpoint {
            let Some(ticket) = endpoint.ticket else { continue };
            let stream = self.client.do_get(ticket).await.map_err(|e| sql_error(statement, &e))?;
            let got: Vec<RecordBatch> = stream.try_collect().await.map_err(|e| sql_error(statement, &e))?;
            if let Some(first) = got.first() {
                schema.get_or_insert_with(|| first.schema());
            }
            batches.extend(got);
        }
        let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
        let elapsed = started.elapsed();
        self.print(schema.as_ref(), &batches)?;
        if self.format == OutputFormat::Table {
            println!("({rows} row{})", if rows == 1 { "" } else { "s" });
        }
        if self.timing {
            eprintln!("Time: {:.3} ms", elapsed.as_secs_f64() * 1e3);
        }
        Ok(())
    }

    fn print(&self, schema: Option<&Arc<arrow_schema::Schema>>, batches: &[RecordBatch]) -> Result<(), String> {
        let stdout = std::io::stdout();
        let mut out = stdout.lock();
        match self.format {
            OutputFormat::Table => {
                let table = arrow_cast::pretty::pretty_format_batches(batches).map_err(|e| e.to_string())?;
                writeln!(out, "{table}").map_err(|e| e.to_string())
            }
            format => {
                let schema = schema.cloned().unwrap_or_else(|| Arc::new(arrow_schema::Schema::empty()));
                write_rows(format, &schema, batches, &mut out)
            }
        }
    }

    /// A backslash command (module docs).
    async fn backslash(&mut self, command: &str) -> Result<(), String> {
        let mut words = command.split_whitespace();
        match (words.next().unwrap_or(""), words.next()) {
            ("\\?" | "\\h" | "\\help", _) => println!("{HELP}"),
            ("\\timing", _) => {
                self.timing = !self.timing;
                println!("timing is {}", if self.timing { "on" } else { "off" });
            }
            ("\\format", Some(name)) => {
                self.format = match name {
                    "table" => OutputFormat::Table,
                    "json" => OutputFormat::Json,
                    "jsonl" => OutputFormat::Jsonl,
                    "csv" => OutputFormat::Csv,
                    other => return Err(format!("unknown format {other:?}: table, json, jsonl or csv")),
                };
            }
            ("\\dt", _) => {
                for (name, _) in self.tables(None).await? {
                    println!("{name}");
                }
            }
            ("\\d", Some(table)) => {
                let tables = self.tables(Some(table)).await?;
                let Some((_, Some(schema))) = tables.into_iter().find(|(name, _)| name == table) else {
                    return Err(format!("no table {table:?} (\\dt lists them)"));
                };
                for field in schema.fields() {
                    println!("{:<40} {}", field.name(), field.data_type());
                }
            }
            ("\\d", None) => return Err("\\d takes a table: \\d events (\\dt lists them)".into()),
            (other, _) => return Err(format!("unknown command {other} (\\? lists them)")),
        }
        Ok(())
    }

    /// The tables (Flight SQL's `GetTables`), with their schemas when `only` names one.
    async fn tables(&mut self, only: Option<&str>) -> Result<Vec<(String, Option<arrow_schema::Schema>)>, String> {
        let request = CommandGetTables {
            include_schema: only.is_some(),
            table_name_filter_pattern: only.map(ToOwned::to_owned),
            ..CommandGetTables::default()
        };
        let info = self.client.get_tables(request).await.map_err(|e| e.to_string())?;
        let mut tables = Vec::new();
        for endpoint in info.endpoint {
            let Some(ticket) = endpoint.ticket else { continue };
            let batches: Vec<RecordBatch> = self.client.do_get(ticket).await.map_err(|e| e.to_string())?.try_collect().await.map_err(|e| e.to_string())?;
            for batch in batches {
                let names = batch.column_by_name("table_name").and_then(|c| c.as_any().downcast_ref::<StringArray>().cloned());
                let schemas = batch.column_by_name("table_schema").and_then(|c| c.as_any().downcast_ref::<BinaryArray>().cloned());
                let Some(names) = names else { continue };
                for row in 0..names.len() {
                    let schema = schemas
                        .as_ref()
                        .filter(|s| !s.is_null(row))
                        .and_then(|s| arrow_ipc::convert::try_schema_from_ipc_buffer(s.value(row)).ok());
                    tables.push((names.value(row).to_owned(), schema));
                }
            }
        }
        Ok(tables)
    }
}

/// True when `text` ends with a `;` outside quotes (a statement is complete).
fn ends_statement(text: &str) -> bool {
    let trimmed = text.trim_end();
    let (semicolons, open_quote) = semicolons(trimmed);
    !open_quote && semicolons.last().is_some_and(|&at| at + 1 == trimmed.len())
}

/// The byte offsets of the `;`s of `text` outside quotes (`'…'` strings, `"…"` identifiers;
/// a doubled quote closes and reopens, so it stays inside), and whether `text` ends inside a
/// quote.
fn semicolons(text: &str) -> (Vec<usize>, bool) {
    let mut found = Vec::new();
    let mut quote: Option<char> = None;
    for (at, c) in text.char_indices() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if c == '\'' || c == '"' => quote = Some(c),
            None if c == ';' => found.push(at),
            None => {}
        }
    }
    (found, quote.is_some())
}

/// The statements of `text`, split at `;` outside quotes ([`semicolons`]), trimmed, empty
/// ones left out.
fn split_statements(text: &str) -> Vec<String> {
    let (cuts, _) = semicolons(text);
    let mut statements = Vec::with_capacity(cuts.len() + 1);
    let mut from = 0;
    for cut in cuts {
        statements.push(&text[from..cut]);
        from = cut + 1;
    }
    statements.push(&text[from..]);
    statements.into_iter().map(str::trim).filter(|s| !s.is_empty()).map(ToOwned::to_owned).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statements_split_at_semicolons_outside_quotes() {
        assert_eq!(split_statements("SELECT 1; SELECT ';' FROM t;\n"), vec!["SELECT 1", "SELECT ';' FROM t"]);
        assert_eq!(split_statements("SELECT \"a;b\" FROM t"), vec!["SELECT \"a;b\" FROM t"]);
        assert_eq!(split_statements("SELECT 'it''s;' FROM t; ;"), vec!["SELECT 'it''s;' FROM t"]);
        assert!(ends_statement("SELECT *\nFROM t;\n"));
        assert!(!ends_statement("SELECT *\nFROM t\n"));
        assert!(!ends_statement("SELECT 'a;\n"));
    }
}
