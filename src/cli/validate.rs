//! `okstra validate` and `okstra schema`.

use super::{report, Ended};
use okstra::compile::Ctx;
use okstra::diag::{Code, Diagnostics, ExitStatus, Format};
use okstra::document::{self, Kind};
use okstra::schema::SchemaKind;
use okstra::source::Format as SourceFormat;
use std::path::{Path, PathBuf};

#[derive(clap::Args, Debug)]
pub struct ValidateArgs {
    /// Files to check; `-` reads one from stdin (named `<stdin>` in
    /// errors; TOML or JSON, told by its first character).
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// What the files are; guessed from the name and content when omitted.
    #[arg(long, value_enum)]
    pub kind: Option<Kind>,
    /// The project root paths inside the files are relative to.
    #[arg(long, default_value = ".", value_name = "R")]
    pub project_root: PathBuf,
    /// Print the verdict (or errors) as text, or as one JSON document on stdout.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
}

#[derive(clap::Args, Debug)]
pub struct SchemaArgs {
    /// Print this schema (jobs, manifest, metadata, plan or team-state)
    /// byte for byte; without it, list the schemas (or, with --out, write
    /// them all).
    pub name: Option<String>,
    /// Write the schema files into this directory instead of printing.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Print the list (or what was written) as text, or as one JSON
    /// document on stdout; a schema itself is JSON either way.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
}

/// How stdin is named in messages.
pub const STDIN_NAME: &str = "<stdin>";

pub fn validate(args: &ValidateArgs) -> Ended {
    let root = okstra::paths::canonical_root(&args.project_root);
    let mut all = Diagnostics::default();
    let mut checked = Vec::new();
    let mut stdin_read = false;
    for file in &args.files {
        let mut ctx = Ctx::new(root.clone());
        let from_stdin = file.as_os_str() == "-";
        let display = if from_stdin {
            STDIN_NAME.to_string()
        } else {
            file.display().to_string()
        };
        if !from_stdin && plan_checked_as_exec_reads_it(args.kind, file) {
            checked.push((display, Kind::Plan));
            continue;
        }
        let loaded = load_input(&mut ctx, file, &display, &mut stdin_read, &mut all);
        let Some(mut loaded) = loaded else {
            all.extend(std::mem::take(&mut ctx.diags));
            continue;
        };
        let named = if from_stdin {
            Path::new(STDIN_NAME)
        } else {
            file.as_path()
        };
        let kind = args
            .kind
            .unwrap_or_else(|| Kind::guess(named, &|k| loaded.doc.get(k).is_some()));
        document::check(&mut ctx, &mut loaded, kind, named);
        if ctx.diags.is_empty() {
            checked.push((display, kind));
        }
        all.extend(in_line_order(
            std::mem::take(&mut ctx.diags).into_iter().collect(),
        ));
    }
    if !all.is_empty() {
        return Ok(report(&all, args.format));
    }
    match args.format {
        Format::Text => {
            for (file, kind) in &checked {
                outln!("ok: {file} ({})", kind.name())?;
            }
        }
        Format::Json => outln!(
            "{}",
            serde_json::json!({"ok": true, "files": checked.iter().map(|(f, k)| serde_json::json!({"file": f, "kind": k.name()})).collect::<Vec<_>>()})
        )?,
    }
    Ok(ExitStatus::Success)
}

/// Load one input: the file at `file` (named `display`), or stdin for `-`,
/// read once (a second `-` is refused into `all`). `None`: it did not
/// load, and `ctx` or `all` says why.
fn load_input(
    ctx: &mut Ctx,
    file: &Path,
    display: &str,
    stdin_read: &mut bool,
    all: &mut Diagnostics,
) -> Option<okstra::compile::Loaded> {
    if file.as_os_str() != "-" {
        return ctx.load(
            "input",
            display,
            file,
            okstra::paths::Base::CurrentDir,
            SourceFormat::for_path(file),
        );
    }
    if std::mem::replace(stdin_read, true) {
        all.push(
            okstra::diag::Diagnostic::new(
                Code::InputInvalid,
                "`-` is named twice: stdin holds one file",
            )
            .in_file(STDIN_NAME)
            .help("name `-` once; give the other files by path"),
        );
        return None;
    }
    match read_stdin() {
        Ok(bytes) => {
            let format = sniff(&bytes);
            ctx.load_bytes("input", STDIN_NAME, bytes, format)
        }
        Err(d) => {
            ctx.push(d);
            None
        }
    }
}

/// Whether `file` is a plan (named so by `--kind`, or by its name and
/// top-level keys) that passes exec's own reading: streamed, never held
/// whole nor as a tree (a plan of 10,000 jobs is tens of megabytes). A
/// plan that fails it is read again the general way, which locates each
/// problem in the text.
fn plan_checked_as_exec_reads_it(kind: Option<Kind>, file: &Path) -> bool {
    let is_plan = match kind {
        Some(kind) => kind == Kind::Plan,
        None => top_level_keys(file)
            .is_some_and(|keys| Kind::guess(file, &|k| keys.contains(k)) == Kind::Plan),
    };
    is_plan && okstra::exec::load::check(file).is_ok()
}

/// The top-level keys of a JSON object file, its values skipped as they
/// stream by; `None` when it is not one (or is TOML by its name).
fn top_level_keys(file: &Path) -> Option<std::collections::BTreeSet<String>> {
    use serde::de::{Deserializer as _, IgnoredAny, MapAccess, Visitor};
    struct Keys;
    impl<'de> Visitor<'de> for Keys {
        type Value = std::collections::BTreeSet<String>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut keys = std::collections::BTreeSet::new();
            while let Some(key) = map.next_key::<String>()? {
                map.next_value::<IgnoredAny>()?;
                keys.insert(key);
            }
            Ok(keys)
        }
    }
    if SourceFormat::for_path(file) != SourceFormat::Json {
        return None;
    }
    let reader = std::io::BufReader::new(std::fs::File::open(file).ok()?);
    serde_json::Deserializer::from_reader(reader)
        .deserialize_map(Keys)
        .ok()
}

/// All of stdin, or the diagnostic saying why not.
fn read_stdin() -> Result<Vec<u8>, okstra::diag::Diagnostic> {
    use std::io::Read;
    let mut bytes = Vec::new();
    std::io::stdin()
        .lock()
        .read_to_end(&mut bytes)
        .map_err(|e| {
            okstra::diag::Diagnostic::new(Code::InputUnreadable, format!("cannot read stdin: {e}"))
                .in_file(STDIN_NAME)
                .help("pipe the file in: okstra validate - < spec.toml")
        })?;
    Ok(bytes)
}

/// JSON when the text starts (after blanks) with `{`, or with `[` and the
/// whole parses as JSON; TOML otherwise (whose `[table]` headers also
/// start with `[`).
fn sniff(bytes: &[u8]) -> SourceFormat {
    let start = bytes.iter().find(|b| !b.is_ascii_whitespace());
    let json = match start {
        Some(b'{') => true,
        Some(b'[') => serde_json::from_slice::<serde::de::IgnoredAny>(bytes).is_ok(),
        _ => false,
    };
    if json {
        SourceFormat::Json
    } else {
        SourceFormat::Toml
    }
}

/// One file's diagnostics in the order a reader meets them: by line, then
/// column (what concerns the whole file first). The rules find problems
/// in their own order; files keep the order they were named in.
fn in_line_order(mut diags: Vec<okstra::diag::Diagnostic>) -> Vec<okstra::diag::Diagnostic> {
    diags.sort_by_key(|d| {
        let loc = d.location.as_ref();
        (
            loc.and_then(|l| l.line()).unwrap_or(0),
            loc.and_then(|l| l.column()).unwrap_or(0),
        )
    });
    diags
}

pub fn schema(args: &SchemaArgs) -> Ended {
    let kinds: Vec<SchemaKind> = match &args.name {
        None => SchemaKind::ALL.to_vec(),
        Some(name) => match SchemaKind::from_name(name) {
            Some(k) => vec![k],
            None => {
                let names: Vec<&str> = SchemaKind::ALL.iter().map(|k| k.name()).collect();
                let d = okstra::diag::Diagnostic::new(
                    Code::InputInvalid,
                    format!("no schema named `{name}`"),
                )
                .help(format!("choose one of: {}", names.join(", ")));
                return Ok(report(&Diagnostics::from(d), args.format));
            }
        },
    };
    let entry = |k: &SchemaKind| serde_json::json!({"name": k.name(), "file": k.file_name()});
    match &args.out {
        Some(dir) => {
            let mut wrote = Vec::new();
            for k in &kinds {
                let path = dir.join(k.file_name());
                if let Err(e) =
                    std::fs::create_dir_all(dir).and_then(|_| std::fs::write(&path, k.text()))
                {
                    let d = okstra::diag::Diagnostic::new(
                        Code::OutputUnwritable,
                        format!("cannot write {}: {e}", path.display()),
                    )
                    .in_file(path.display().to_string())
                    .help("choose a writable --out directory");
                    return Ok(report(&Diagnostics::from(d), args.format));
                }
                if args.format == Format::Text {
                    outln!("wrote {}", path.display())?;
                }
                wrote.push(path.display().to_string());
            }
            if args.format == Format::Json {
                outln!("{}", serde_json::json!({"ok": true, "wrote": wrote}))?;
            }
        }
        // A schema is JSON already: printed byte for byte in either format.
        None if args.name.is_some() => out!("{}", kinds[0].text())?,
        None => match args.format {
            Format::Json => outln!(
                "{}",
                serde_json::to_string_pretty(&serde_json::json!({
                    "ok": true,
                    "schemas": kinds.iter().map(entry).collect::<Vec<_>>(),
                }))
                .unwrap_or_default()
            )?,
            Format::Text => {
                for k in &kinds {
                    outln!("{:<11} {}", k.name(), k.file_name())?;
                }
                outln!("\nPrint one with `okstra schema NAME`, or write them all with `okstra schema --out DIR`.")?;
            }
        },
    }
    Ok(ExitStatus::Success)
}
